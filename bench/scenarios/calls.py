"""The seller's question: 100 API calls by one buyer, pay once or pay every call.

x402srv: one purchase through x402srv (facilitator strategy: the same local
facilitator the official middleware uses), then 100 calls to the seller's
guarded ``GET /weather`` with the grant's token, all through one official
client. x402srv selling calls: the gateway in front of the seller's API with a
plan of 100 calls ($10, the price of 100 paid calls); the official client's
first call pays the 402 (the plan) and the next 99 carry the token, each
spending one credit in the store. The official middleware: 100 calls to its
``GET /weather`` with the official client, each one paid and settled. Every
server answers one unpaid request first (they are running already when a
buyer arrives); wall time then
covers everything the buyer waits for (purchase included); on-chain
transactions are the token's Transfer logs to each seller's wallet.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
from eth_account import Account

from x402srv.testing import toml
from x402srv.testing.buyers import paying_client

from ..stack import Stack
from ..table import Row, verdict

__all__ = ["run"]

SECTION = "The seller's question: 100 API calls by one buyer"
CALLS = 100


@dataclass(frozen=True)
class Outcome:
    seconds: float
    transactions: int


def _transfers_to(stack: Stack, pay_to: str, from_block: int) -> int:
    return len(stack.chain.transfer_logs(to=pay_to, from_block=from_block))


def _timed(stack: Stack, pay_to: str, work: Callable[[], Coroutine[Any, Any, float]]) -> Outcome:
    """Run ``work`` (which times its own calls) and count the transfers it caused."""
    first_block = stack.chain.rpc.block_number() + 1
    seconds = asyncio.run(work())
    return Outcome(seconds, _transfers_to(stack, pay_to, first_block))


async def _warm_up(*requests: tuple[str, str]) -> None:
    """One unpaid request per server before the clock starts: a seller's server is
    running already when a buyer arrives, so neither side pays its first-request
    costs (lazy imports, first connections) inside the measured time."""
    async with httpx.AsyncClient() as plain:
        for method, url in requests:
            response = await plain.request(method, url, json={} if method == "POST" else None)
            if response.status_code not in (200, 402):
                raise RuntimeError(f"warm-up {url}: {response.status_code}")


def run(stack: Stack, calls: int = CALLS) -> list[Row]:
    buyer = stack.chain.new_account(eth=0, usdc_atomic=10**12)

    official_pay_to = Account.create().address
    official_url = stack.official(official_pay_to)

    async def pay_every_call() -> float:
        await _warm_up(("GET", f"{official_url}/weather"))
        http, _ = paying_client(buyer)
        async with http:
            started = time.perf_counter()
            for _ in range(calls):
                response = await http.get(f"{official_url}/weather")
                if response.status_code != 200:
                    raise RuntimeError(f"paid call failed: {response.status_code}")
            return time.perf_counter() - started

    try:
        official = _timed(stack, official_pay_to, pay_every_call)
    finally:
        stack.stop_app(official_url)

    our_pay_to = Account.create().address
    server = stack.x402srv(
        stack.config(store="sqlite", settlement="facilitator", pay_to=our_pay_to), "calls"
    )
    api = stack.seller_api(server.config_path)

    async def pay_once() -> float:
        await _warm_up(("POST", server.access_url), ("GET", f"{api}/open"))
        http, _ = paying_client(buyer)  # one client for the purchase and the calls
        async with http:
            started = time.perf_counter()
            bought = await http.post(server.access_url, json={"planId": "hourly"})
            if bought.status_code != 200:
                raise RuntimeError(f"purchase failed: {bought.status_code}")
            headers = {"Authorization": f"Bearer {bought.json()['accessToken']}"}
            for _ in range(calls):
                response = await http.get(f"{api}/weather", headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"guarded call failed: {response.status_code}")
            return time.perf_counter() - started

    try:
        ours = _timed(stack, our_pay_to, pay_once)
    finally:
        stack.stop_app(api)
        stack.stop_server(server)

    credits = _credit_plan(stack, buyer, calls)
    speedup = official.seconds / ours.seconds
    fewer = official.transactions / max(ours.transactions, 1)
    metered_speedup = official.seconds / credits.seconds
    metered_fewer = official.transactions / max(credits.transactions, 1)
    return [
        Row(
            SECTION,
            f"official middleware: {calls} paid calls",
            f"{official.seconds:7.2f} s wall  {official.transactions:4d} on-chain transactions",
        ),
        Row(
            SECTION,
            f"x402srv: 1 purchase + {calls} guarded calls",
            f"{ours.seconds:7.2f} s wall  {ours.transactions:4d} on-chain transaction(s)",
            (
                verdict(">= 20x less wall time", speedup >= 20, f"{speedup:.1f}x"),
                verdict(">= 100x fewer on-chain transactions", fewer >= 100, f"{fewer:.0f}x"),
            ),
        ),
        Row(
            SECTION,
            f"x402srv gateway: a {calls}-call plan, {calls} metered calls",
            f"{credits.seconds:7.2f} s wall  {credits.transactions:4d} on-chain transaction(s)",
            (
                # (each call is proxied by the gateway and spends a credit: one hop more)
                verdict(">= 10x less wall time", metered_speedup >= 10, f"{metered_speedup:.1f}x"),
                verdict(
                    ">= 100x fewer on-chain transactions",
                    metered_fewer >= 100,
                    f"{metered_fewer:.0f}x",
                ),
            ),
        ),
    ]


def _credit_plan(stack: Stack, buyer: Any, calls: int) -> Outcome:
    """The gateway sells ``calls`` calls; the official client's first call buys them."""
    pay_to = Account.create().address
    api_config = stack.directory / "calls-api.toml"
    api_config.write_text(toml.dumps(stack.config(store="sqlite", settlement="facilitator")))
    api = stack.seller_api(api_config)
    plan = {
        "plan_id": f"calls-{calls}",
        "unit_amount": "$10",
        "description": f"{calls} calls",
        "calls": calls,
    }
    document = stack.config(
        store="sqlite",
        settlement="facilitator",
        pay_to=pay_to,
        plans=[plan],
        routes=[{"prefix": "/open", "upstream": api}],
    )
    server = stack.x402srv(document, "credit-plan")

    async def spend_credits() -> float:
        await _warm_up(("GET", f"{server.url}/open"))
        http, _ = paying_client(buyer)
        async with http:
            started = time.perf_counter()
            first = await http.get(f"{server.url}/open")  # 402, paid, forwarded: call 1
            if first.status_code != 200:
                raise RuntimeError(f"purchase through the gateway failed: {first.status_code}")
            headers = {"Authorization": f"Bearer {first.headers['x-x402-access-token']}"}
            for _ in range(calls - 1):
                response = await http.get(f"{server.url}/open", headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"metered call failed: {response.status_code}")
            return time.perf_counter() - started

    try:
        return _timed(stack, pay_to, spend_credits)
    finally:
        stack.stop_app(api)
        stack.stop_server(server)
