"""The bench's scenarios run: each one, on the session's anvil, with the smallest load.

Not a measurement (the figures of one-second runs on a busy test machine mean
nothing): this checks that a scenario starts its processes, buys, loads, and
leaves rows with figures and verdicts instead of a ``FAILED`` row, so that a
change to the gateway or the SDK does not break ``./run bench`` unseen.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator

import pytest

from bench.scenarios import mcp_paid, stream
from bench.stack import Stack
from bench.table import Row
from bench.wrk import Load
from x402srv.devchain import Devchain
from x402srv.testing.fixtures import FacilitatorProcess

pytestmark = pytest.mark.skipif(
    shutil.which("wrk") is None, reason="wrk is not installed (./run bench installs it)"
)

#: One connection-second per wrk run, no warm-up, two calls or streams per timed measure.
TINY = Load(connections=4, threads=1, seconds=1, warmup_seconds=0)


@pytest.fixture(scope="module")
def stack(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """The bench's stack on the session's chain: a facilitator of its own, sqlite stores."""
    stack = Stack(
        chain=devchain,
        directory=tmp_path_factory.mktemp("bench"),
        facilitator=facilitator(),
        redis_url=None,
        gas_wallet=devchain.new_account(eth=10_000, usdc_atomic=0),
    )
    yield stack
    stack.stop()


def _figures(rows: list[Row]) -> dict[str, str]:
    assert rows and not any("FAILED" in row.figures for row in rows)
    return {row.subject: row.figures for row in rows}


def test_paid_mcp_calls_run_through_x402srv_and_the_sdk_wrapper(stack: Stack) -> None:
    rows = mcp_paid.run(stack, TINY, samples=2, runs=1)
    figures = _figures(rows)
    assert [subject.split(":")[0] for subject in figures] == ["unpaid tools/call"] * 2 + [
        "paid call"
    ] * 2
    paid = [f for s, f in figures.items() if s.startswith("paid call: x402srv")]
    assert "the SDK's (no target set)" in paid[0]
    assert not any(row.verdicts for row in rows)  # issue 27 sets no target here


def test_metered_and_unmetered_streams_run_through_the_gateway(stack: Stack) -> None:
    rows = stream.run(stack, TINY, samples=2, runs=1)
    _figures(rows)
    judged = [v.target for row in rows for v in row.verdicts]
    assert judged == [
        "first byte <= 1.1x unmetered (<= 10% slower)",
        ">= 0.9x the unmetered streams/s (<= 10% slower)",
    ]
