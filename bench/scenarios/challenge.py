"""Unpaid requests answered with a 402: the official middleware vs x402srv.

The official middleware answers ``GET /weather`` without a payment with a 402
and stores nothing. x402srv answers ``POST /x402/access {"planId": "hourly"}``
with a 402 for a new challenge it has stored as PENDING first (sqlite or
Redis), which is what lets the buyer's paid retry be matched, claimed once and
replayed later. Same wrk load for every server.
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


def run(stack: Stack, load: Load, many_workers: int) -> tuple[ChallengeFigures, list[Row]]:
    official_url = stack.official(Account.create().address)
    try:
        official = run_wrk(f"{official_url}/weather", load, expect_status=402)
    finally:
        stack.stop_app(official_url)
    rows = [Row(SECTION, "official x402 middleware (uvicorn, 1 worker)", _figures(official))]
    ours: dict[tuple[str, int], WrkResult] = {}
    stores = ["sqlite"] + (["redis"] if stack.redis_url else [])
    for store in stores:
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
            extra = ""
            if store == "sqlite":
                extra = f"  ({_stored(stack, name):,} PENDING records stored)"
            judged: tuple[Verdict, ...] = ()
            if (store, workers) == ("sqlite", 1):
                ratio = result.requests_per_second / official.requests_per_second
                judged = (
                    verdict(
                        ">= 1.5x official req/s and p99 < 20 ms",
                        ratio >= 1.5 and result.p99_ms < 20,
                        f"{ratio:.2f}x, p99 {result.p99_ms:.1f} ms",
                    ),
                )
            rows.append(
                Row(
                    SECTION,
                    f"x402srv {store}, {workers} worker{'s' if workers > 1 else ''}",
                    _figures(result, extra),
                    judged,
                )
            )
    return ChallengeFigures(official, ours), rows
