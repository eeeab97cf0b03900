"""What every bad-input test checks: the problem document, and that nothing changed.

``assert_problem`` holds a response to RFC 9457 with our stable ``code``;
``nothing_changes`` snapshots the seller's sqlite file and the chain's block number
around a request (anvil mines a block for every transaction, so an unchanged block
number means nothing was sent by anyone).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.support.seller import Seller


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """The RFC 9457 problem of ``response`` (httpx's or alike), checked; returned for more."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = dict(response.json())
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["type"] == "about:blank"
    assert problem["title"]
    assert problem["detail"]
    return problem


#: Tables that change on a schedule or per request by design, not by what a request asks:
#: the reconciler's lease (its background pass may run during any test), the
#: unpaid-request counters and the analytics counters (bad input is counted, as the
#: failure reasons of the console's funnel).
NOT_STATE = {"leases", "rate_counters", "counts"}
#: Rows of the tasks table that are not tasks: the reconciler's last-pass summary.
NOT_TASKS = ("x402srv.access.reconciler.last-pass",)


def snapshot(seller: Seller) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the seller's sqlite store that holds purchases."""
    path = seller.server.directory / "x402srv.db"
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: sorted(
                (
                    row
                    for row in db.execute(f"SELECT * FROM {t}").fetchall()  # noqa: S608
                    if not (t == "tasks" and row[0] in NOT_TASKS)
                ),
                key=repr,
            )
            for t in tables
            if t not in NOT_STATE
        }


@contextmanager
def nothing_changes(seller: Seller) -> Iterator[None]:
    """The block runs without a transaction on the chain or a change to the seller's store."""
    before, block = snapshot(seller), seller.chain.rpc.block_number()
    yield
    assert seller.chain.rpc.block_number() == block, "a transaction was sent"
    assert snapshot(seller) == before, "the store changed"
