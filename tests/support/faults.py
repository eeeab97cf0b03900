"""Sellers with one thing wrong on purpose: a locked store, a slow facilitator, a failing issuer.

Only the fault is injected; everything around it (the server process, the chain,
the facilitator's code) is real.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.seller import Seller

#: Facilitator timeouts short enough for a test to outwait.
FAST = {"read_timeout_seconds": 2, "confirm_seconds": 1}


def lockable_store() -> dict[str, Any]:
    """A ``[store]`` table whose sqlite gives up within 200 ms when ``locked`` holds it."""
    return {"backend": "sqlite", "path": "x402srv.db", "sqlite": {"busy_timeout_ms": 200}}


@contextmanager
def locked(database: Path) -> Iterator[None]:
    """Hold sqlite's write lock from another connection, as a stuck writer would."""
    connection = sqlite3.connect(database, isolation_level=None, timeout=0.1)
    connection.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        connection.execute("ROLLBACK")
        connection.close()


def facilitator_seller(start_seller: Callable[..., Seller], url: str, **options: object) -> Seller:
    """A seller settling through the facilitator at ``url``, with ``FAST`` timeouts."""
    return start_seller(
        "facilitator",
        settlement={
            "strategy": "facilitator",
            "facilitator_url": url,
            "facilitator": {**FAST, **options},
        },
    )


def issuer_failing_once(callback_dir: Path) -> dict[str, Any]:
    """``start_seller`` options: a ``callback`` issuer whose backend fails once per challenge.

    The callback (``tests.support.seller_callbacks``) runs in the server process and
    leaves a marker file per challenge in ``callback_dir``.
    """
    return {
        "credentials": {
            "issuer": "callback",
            "callback": "tests.support.seller_callbacks:fail_first_time",
        },
        "env": {"PYTHONPATH": str(REPO), "X402SRV_TEST_CALLBACK_DIR": str(callback_dir)},
    }


def leaving_at_the_end(upstream_url: str) -> dict[str, str]:
    """A seller's env: the buyer leaves each answer of ``upstream_url`` as its last chunk passes.

    ``tests/support/leaving/sitecustomize.py`` cancels the gateway's handler right
    after that upstream's answer ended, as a buyer closing its socket at that instant
    would (a race a real socket cannot win every time).
    """
    leaving = REPO / "tests" / "support" / "leaving"
    return {
        "PYTHONPATH": os.pathsep.join([str(leaving), str(REPO)]),
        "X402SRV_TEST_LEAVE_AFTER": upstream_url,
    }


def leaving_on_connect(upstream_port: int) -> dict[str, str]:
    """A seller's env: the buyer leaves as each new connection to ``upstream_port`` opens.

    ``tests/support/leaving/sitecustomize.py`` cancels the gateway's handler right
    after its new upstream connection is open, before the call's first byte goes
    out on it (a race a real socket cannot win every time).
    """
    leaving = REPO / "tests" / "support" / "leaving"
    return {
        "PYTHONPATH": os.pathsep.join([str(leaving), str(REPO)]),
        "X402SRV_TEST_LEAVE_ON_CONNECT": str(upstream_port),
    }


def leaving_in_spend(route_prefix: str) -> dict[str, str]:
    """A seller's env: on ``route_prefix``, the buyer leaves while its credits are spent.

    ``tests/support/leaving/sitecustomize.py`` cancels the gateway's handler just
    after the sqlite store wrote the spend, while the handler still awaits it.
    """
    leaving = REPO / "tests" / "support" / "leaving"
    return {
        "PYTHONPATH": os.pathsep.join([str(leaving), str(REPO)]),
        "X402SRV_TEST_LEAVE_IN_SPEND": route_prefix,
    }
