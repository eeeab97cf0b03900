"""The seller's API: the same route with the token guard and without it.

A buyer buys once from x402srv (gas wallet, sqlite) and calls ``GET /weather``
(behind ``require_access``) with its token; ``GET /open`` is the same handler
unguarded. Target (issue 25): a guarded call costs at most 25% more than the bare
route (>= 80% of its rate), judged on the median of the per-round ratios.

What makes the two comparable, so the ratio is the guard's cost and nothing else:

- one app, one worker, the same handler and settings, the same answer (the guard
  adds no field to a call it lets through);
- the same request: ``/open`` gets the buyer's ``Authorization`` header too, which it
  ignores (the buyer sends it either way; reading ~600 more header bytes is the
  request's cost, not the guard's);
- the x402srv that sold the token is stopped before the load: the guard checks the
  token on its own (no revocation list), and the seller's confirmation work after the
  sale would otherwise land on whichever route is measured first;
- ``runs`` rounds, alternating which route goes first, each route ``load.seconds``
  per round: drift on a shared machine hits both, and every row shows its spread.
"""

from __future__ import annotations

import asyncio

from x402srv.testing.buyers import paying_client

from ..stack import Stack
from ..table import Row, Spread, rate, verdict
from ..wrk import Load, WrkResult, run_wrk

__all__ = ["buy_token", "run"]

SECTION = "Guarded seller route (x402srv.guard.require_access, Sanic, 1 worker)"


async def _buy(url: str, stack: Stack, plan_id: str) -> str:
    buyer = stack.chain.new_account(eth=0, usdc_atomic=10**9)
    http, _ = paying_client(buyer)
    async with http:
        response = await http.post(url, json={"planId": plan_id})
    if response.status_code != 200:
        raise RuntimeError(f"purchase failed: {response.status_code} {response.text}")
    return str(response.json()["accessToken"])


def buy_token(url: str, stack: Stack, plan_id: str = "hourly") -> str:
    """One purchase with the official client; the grant's bearer token."""
    return asyncio.run(_buy(url, stack, plan_id))


def run(stack: Stack, load: Load, runs: int) -> list[Row]:
    server = stack.x402srv(stack.config(store="sqlite", settlement="gas-wallet"), "guard")
    try:
        token = buy_token(server.access_url, stack)
    finally:
        stack.stop_server(server)
    api = stack.seller_api(server.config_path)
    headers = {"Authorization": f"Bearer {token}"}
    results: dict[str, list[WrkResult]] = {"open": [], "weather": []}
    try:
        for round_ in range(runs):
            for path in ("open", "weather") if round_ % 2 == 0 else ("weather", "open"):
                results[path].append(run_wrk(f"{api}/{path}", load, headers=headers))
    finally:
        stack.stop_app(api)
    ratios = Spread.of(
        [
            guarded.requests_per_second / bare.requests_per_second
            for guarded, bare in zip(results["weather"], results["open"], strict=True)
        ]
    )
    return [
        Row(SECTION, "GET /open, no guard (same request)", _figures(results["open"])),
        Row(
            SECTION,
            "GET /weather, with guard (valid token)",
            _figures(results["weather"]),
            (
                verdict(
                    ">= 80% of the unguarded route (<= 25% more per call)",
                    ratios.median >= 0.8,
                    ratios.show(lambda r: f"{r:.0%}"),
                ),
            ),
        ),
    ]


def _figures(runs: list[WrkResult]) -> str:
    """Requests per second over the runs; latencies and errors of the median run."""
    median = sorted(runs, key=lambda r: r.requests_per_second)[len(runs) // 2]
    text = (
        f"{Spread.of([r.requests_per_second for r in runs]).show(rate)} req/s  "
        f"p50 {median.p50_ms:5.1f} ms  p99 {median.p99_ms:5.1f} ms"
    )
    if any(r.errors or not r.statuses_ok for r in runs):
        errors = sum(r.errors for r in runs)
        ok = all(r.statuses_ok for r in runs)
        text += f"  (socket errors {errors}, expected statuses: {ok})"
    return text
