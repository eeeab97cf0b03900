"""The seller's API: the same route with the token guard and without it.

A buyer buys once from x402srv (gas wallet, sqlite) and calls ``GET /weather``
(behind ``require_access``) with its token; ``GET /open`` is the same handler
unguarded. Same wrk load for both; the ratio is guarded / unguarded. Target (issue 25):
a guarded call costs at most 25% more than the bare route (>= 80% of its rate).
"""

from __future__ import annotations

import asyncio

from x402srv.testing.buyers import paying_client

from ..stack import Stack
from ..table import Row, verdict
from ..wrk import Load, run_wrk

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


def run(stack: Stack, load: Load) -> list[Row]:
    server = stack.x402srv(stack.config(store="sqlite", settlement="gas-wallet"), "guard")
    api = ""
    try:
        token = buy_token(server.access_url, stack)
        api = stack.seller_api(server.config_path)
        guarded = run_wrk(f"{api}/weather", load, headers={"Authorization": f"Bearer {token}"})
        unguarded = run_wrk(f"{api}/open", load)
    finally:
        if api:
            stack.stop_app(api)
        stack.stop_server(server)
    ratio = guarded.requests_per_second / unguarded.requests_per_second
    return [
        Row(SECTION, "GET /open, no guard", unguarded.summary()),
        Row(
            SECTION,
            "GET /weather, with guard (valid token)",
            guarded.summary(),
            (
                verdict(
                    ">= 80% of the unguarded route (<= 25% more per call)",
                    ratio >= 0.8,
                    f"{ratio:.0%}",
                ),
            ),
        ),
    ]
