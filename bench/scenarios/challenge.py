"""Unpaid requests answered with a 402: the official middleware vs x402srv.

The official middleware answers ``GET /weather`` without a payment with a 402
and stores nothing. x402srv answers ``POST /x402/access {"planId": "hourly"}``
with a 402 for a new challenge it has stored as PENDING first (sqlite, Redis
or PostgreSQL), which is what lets the buyer's paid retry be matched, claimed
once and replayed later. Same wrk load for every server; every x402srv figure
is also given as a ratio to the official middleware's, measured in the same run.

Targets (issue 16), on one worker: sqlite at least 2x the official rate, Redis
at least sqlite's, PostgreSQL at least 1.2x the official rate.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from eth_account import Account

from ..stack import Stack
from ..table import Row, Verdict, verdict
from ..wrk import Load, WrkResult, run_wrk

__all__ = ["ChallengeFigures", "run"]

SECTION = "Challenge issuance: 402 responses"
BODY = '{"planId":"hourly"}'


@dataclass(frozen=True)
class ChallengeFigures:
    official: WrkResult
    ours: dict[tuple[str, int], WrkResult]  # (store, workers) -> result


def _figures(result: WrkResult, extra: str = "") -> str:
    return result.summary() + extra


def _stored(stack: Stack, name: str) -> int:
    path = stack.directory / name / "x402srv.db"
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT count(*) FROM challenges WHERE state = 'PENDING'").fetchone()
    return int(row[0])


def _judged(
    store: str,
    workers: int,
    ratio: float,
    ours: dict[tuple[str, int], WrkResult],
) -> tuple[Verdict, ...]:
    if store == "sqlite":
        return (verdict(">= 2x official req/s", ratio >= 2, f"{ratio:.2f}x"),)
    if store == "postgres":
        return (verdict(">= 1.2x official req/s", ratio >= 1.2, f"{ratio:.2f}x"),)
    sqlite = ours.get(("sqlite", workers))
    if store == "redis" and sqlite is not None:
        mine = ours[(store, workers)].requests_per_second
        return (
            verdict(
                ">= sqlite req/s (1 worker)",
                mine >= sqlite.requests_per_second,
                f"{mine / sqlite.requests_per_second:.2f}x sqlite",
            ),
        )
    return ()


def run(stack: Stack, load: Load, many_workers: int) -> tuple[ChallengeFigures, list[Row]]:
    official_url = stack.official(Account.create().address)
    try:
        official = run_wrk(f"{official_url}/weather", load, expect_status=402)
    finally:
        stack.stop_app(official_url)
    rows = [Row(SECTION, "official x402 middleware (uvicorn, 1 worker)", _figures(official))]
    ours: dict[tuple[str, int], WrkResult] = {}
    for store in stack.stores:
        for workers in sorted({1, many_workers}):
            name = f"challenge-{store}-{workers}"
            server = stack.x402srv(
                stack.config(store=store, settlement="gas-wallet"), name, workers=workers
            )
            try:
                result = run_wrk(
                    server.access_url,
                    load,
                    method="POST",
                    body=BODY,
                    headers={"Content-Type": "application/json"},
                    expect_status=402,
                )
            finally:
                stack.stop_server(server)
            ours[(store, workers)] = result
            ratio = result.requests_per_second / official.requests_per_second
            extra = f"  = {ratio:.2f}x official"
            if store == "sqlite":
                extra += f"  ({_stored(stack, name):,} PENDING records stored)"
            judged = _judged(store, workers, ratio, ours) if workers == 1 else ()
            rows.append(
                Row(
                    SECTION,
                    f"x402srv {store}, {workers} worker{'s' if workers > 1 else ''}",
                    _figures(result, extra),
                    judged,
                )
            )
    return ChallengeFigures(official, ours), rows
