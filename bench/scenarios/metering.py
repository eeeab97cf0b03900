"""Metered calls through the gateway: what a credit spend costs per request, on sqlite and Redis.

One x402srv gateway per store in front of the seller's API (``bench.seller_app``'s
``GET /open``, a fixed JSON answer), with two routes to it: ``/metered`` open to
a plan that sells calls (every request spends one credit in the store: one
round trip) and ``/unmetered`` open to a plan sold by time (a token check, no
store). A buyer buys both with the official client; wrk then loads each route
with its token, the same load for both, in alternating runs (``_interleaved``),
and the ratio is metered / unmetered. Target (issue 25): a metered call costs at most
25% more than an unmetered one (>= 80% of its rate).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from x402srv.testing import toml

from ..stack import Stack
from ..table import Row, verdict
from ..wrk import Load, WrkResult, run_wrk
from .guard import buy_token

__all__ = ["run"]

SECTION = "Metered calls through the gateway (1 worker): a credit spent per request"
#: More credits than any run spends: the metered route never answers 402 under load.
CREDITS = 1_000_000_000
#: Alternating runs per route (see ``_interleaved``).
ROUNDS = 3
PLANS: list[dict[str, Any]] = [
    {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of API access"},
    {"plan_id": "calls", "unit_amount": "$0.10", "description": "Calls", "calls": CREDITS},
]


def _routes(api: str) -> list[dict[str, Any]]:
    return [
        {"prefix": "/metered", "upstream": api, "plans": ["calls"], "strip_prefix": True},
        {"prefix": "/unmetered", "upstream": api, "plans": ["hourly"], "strip_prefix": True},
    ]


def _one_store(stack: Stack, load: Load, store: str) -> list[Row]:
    # The seller's API reads a seller config for its own guard (unused by /open).
    api_config = stack.directory / f"api-{store}.toml"
    api_config.write_text(toml.dumps(stack.config(store="sqlite", settlement="gas-wallet")))
    api = stack.seller_api(api_config)
    server = stack.x402srv(
        stack.config(store=store, settlement="gas-wallet", plans=PLANS, routes=_routes(api)),
        f"metered-{store}",
    )
    try:
        metered_token = buy_token(server.access_url, stack, plan_id="calls")
        hourly_token = buy_token(server.access_url, stack, plan_id="hourly")
        targets = {
            "metered": (f"{server.url}/metered/open", metered_token),
            "unmetered": (f"{server.url}/unmetered/open", hourly_token),
        }
        metered, unmetered = _interleaved(targets, load)
    finally:
        stack.stop_app(api)
        stack.stop_server(server)
    ratio = metered.requests_per_second / unmetered.requests_per_second
    return [
        Row(
            SECTION, f"{store}: unmetered route (time plan, token check only)", unmetered.summary()
        ),
        Row(
            SECTION,
            f"{store}: metered route (one credit spent per request)",
            metered.summary(),
            (
                verdict(
                    ">= 80% of the unmetered route (<= 25% more per call)",
                    ratio >= 0.8,
                    f"{ratio:.0%}",
                ),
            ),
        ),
    ]


def _interleaved(
    targets: dict[str, tuple[str, str]], load: Load, rounds: int = ROUNDS
) -> tuple[WrkResult, WrkResult]:
    """Both routes in alternating short runs, combined: drift on a shared machine hits both.

    Each route gets ``rounds`` runs of ``load.seconds / rounds`` (3 s at least),
    in the order metered, unmetered, unmetered, metered ...; requests per second
    are the total over all runs, latencies those of the median run.
    """
    share = replace(load, seconds=float(max(3, round(load.seconds / rounds))))  # wrk: whole s
    results: dict[str, list[WrkResult]] = {name: [] for name in targets}
    order = list(targets)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else reversed(order):
            url, token = targets[name]
            results[name].append(run_wrk(url, share, headers={"Authorization": f"Bearer {token}"}))
    combined = [_combine(results[name], share.seconds) for name in order]
    return combined[0], combined[1]


def _combine(runs: list[WrkResult], seconds: float) -> WrkResult:
    median = sorted(runs, key=lambda r: r.requests_per_second)[len(runs) // 2]
    requests = sum(r.requests for r in runs)
    return WrkResult(
        requests_per_second=requests / (seconds * len(runs)),
        p50_ms=median.p50_ms,
        p99_ms=median.p99_ms,
        requests=requests,
        errors=sum(r.errors for r in runs),
        statuses_ok=all(r.statuses_ok for r in runs),
    )


def run(stack: Stack, load: Load) -> list[Row]:
    rows = _one_store(stack, load, "sqlite")
    if stack.redis_url is not None:
        rows += _one_store(stack, load, "redis")
    return rows
