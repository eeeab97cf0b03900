"""Unpaid requests answered with a 402: the official middleware vs x402srv, every store.

The official middleware answers ``GET /weather`` without a payment with a 402
and stores nothing. x402srv answers ``POST /x402/access {"planId": "hourly"}``
with a 402 for a new challenge it has stored as PENDING first (sqlite, Redis
or PostgreSQL; inserts that wait at once share one commit), which is what lets
the buyer's paid retry be matched, claimed once and replayed later. The
unpaid-request limit stays on, counting every request, with a threshold no run
reaches (``Stack.config``). A discovery 402 (``POST {}``) stores nothing and is
set against a route without a price on the official app (``/healthz``: FastAPI
and the middleware passing it through) instead.

All servers run at once, one worker each, and are loaded in turn with the same
wrk load, ``runs`` times (the order rotating): each row gives the spread of its
rate over the runs, and each ratio is taken within a run, official and x402srv
measured minutes apart at most.

Target (issue 25): every store at least 2x the official rate (median of the
per-run ratios).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from eth_account import Account

from ..stack import Stack
from ..table import Row, Spread, ms, rate, times, verdict
from ..wrk import Load, WrkResult, run_wrk

__all__ = ["ChallengeFigures", "run"]

SECTION = "Unpaid requests: 402 responses (1 worker each, unpaid-request limit counting)"
BODY = '{"planId":"hourly"}'
#: What the issue asks of every store: its 402 rate over the official middleware's.
TARGET = 2.0


@dataclass(frozen=True)
class ChallengeFigures:
    official: WrkResult  # its median run (the reconciler's reference)
    ours: dict[str, list[WrkResult]]  # store -> runs


def _stored(stack: Stack, name: str) -> int:
    path = stack.directory / name / "x402srv.db"
    with sqlite3.connect(path) as conn:
        row = conn.execute("SELECT count(*) FROM challenges WHERE state = 'PENDING'").fetchone()
    return int(row[0])


def _post(url: str, body: str, load: Load) -> WrkResult:
    return run_wrk(
        url,
        load,
        method="POST",
        body=body,
        headers={"Content-Type": "application/json"},
        expect_status=402,
    )


def _summary(runs: list[WrkResult]) -> str:
    text = (
        f"{Spread.of([r.requests_per_second for r in runs]).show(rate)} req/s  "
        f"p99 {Spread.of([r.p99_ms for r in runs]).show(ms)} ms"
    )
    errors = sum(r.errors for r in runs)
    if errors or not all(r.statuses_ok for r in runs):
        text += f"  (socket errors {errors}, expected statuses: {all(r.statuses_ok for r in runs)})"
    return text


def run(stack: Stack, load: Load, runs: int) -> tuple[ChallengeFigures, list[Row]]:
    official_url = stack.official(Account.create().address)
    servers = {
        store: stack.x402srv(
            stack.config(store=store, settlement="gas-wallet"), f"challenge-{store}"
        )
        for store in stack.stores
    }
    loads: dict[str, Callable[[], WrkResult]] = {
        "official": lambda: run_wrk(f"{official_url}/weather", load, expect_status=402),
        "bare": lambda: run_wrk(f"{official_url}/healthz", load),
        "discovery": lambda: _post(servers["sqlite"].access_url, "{}", load),
    }
    for store, server in servers.items():
        loads[store] = lambda url=server.access_url: _post(url, BODY, load)  # type: ignore[misc]
    results: dict[str, list[WrkResult]] = {name: [] for name in loads}
    try:
        order = list(loads)
        for round_ in range(runs):
            shift = round_ % len(order)
            for name in order[shift:] + order[:shift]:
                results[name].append(loads[name]())
        stored = _stored(stack, "challenge-sqlite")
    finally:
        stack.stop_app(official_url)
        for server in servers.values():
            stack.stop_server(server)
    official = results["official"]
    rows = [Row(SECTION, "official x402 middleware (uvicorn)", _summary(official))]
    for store in servers:
        ratios = Spread.of(
            [
                m.requests_per_second / o.requests_per_second
                for m, o in zip(results[store], official, strict=True)
            ]
        )
        p99 = Spread.of(
            [m.p99_ms / o.p99_ms for m, o in zip(results[store], official, strict=True)]
        )
        extra = f"  ({stored:,} PENDING records stored)" if store == "sqlite" else ""
        rows.append(
            Row(
                SECTION,
                f"x402srv {store}, new challenge",
                _summary(results[store]) + extra,
                (
                    verdict(
                        f">= {TARGET:g}x official req/s",
                        ratios.median >= TARGET,
                        ratios.show(times),
                    ),
                    verdict(
                        "p99 <= official p99", p99.median <= 1, f"{p99.show(times)} of official"
                    ),
                ),
            )
        )
    discovery = Spread.of(
        [
            d.requests_per_second / b.requests_per_second
            for d, b in zip(results["discovery"], results["bare"], strict=True)
        ]
    )
    rows += [
        Row(
            SECTION,
            "FastAPI route, no price (official app, GET /healthz)",
            _summary(results["bare"]),
        ),
        Row(
            SECTION,
            "x402srv discovery 402 (POST {}, nothing stored)",
            _summary(results["discovery"]),
            (verdict(">= 0.9x the bare route", discovery.median >= 0.9, discovery.show(times)),),
        ),
    ]
    middle = sorted(official, key=lambda r: r.requests_per_second)[len(official) // 2]
    return ChallengeFigures(middle, {store: results[store] for store in servers}), rows
