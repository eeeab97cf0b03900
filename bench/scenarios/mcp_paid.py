"""Paid MCP tool calls: x402srv's MCP gateway against the official SDK's payment wrapper.

Both sell the same FastMCP tool (``forecast``, stateless, JSON answers) one call
at a time for the same price, settled on the same chain through the same local
facilitator:

- the SDK: ``x402.mcp``'s ``create_payment_wrapper`` on the tool function, in
  the seller's own MCP server (``bench.mcp_official_app``): ``/verify`` on the
  facilitator, the tool run, then ``/settle``;
- x402srv: ``[[mcp]] path = "/mcp"`` in front of the unchanged server
  (``bench.mcp_app``), the tool priced ``price = "$0.01"``, the facilitator
  strategy: its ``eth_call`` preflight and ``/settle``, then the call forwarded.

Two measures, each over ``runs`` runs with the order alternating (drift on a
shared machine hits both):

- **unpaid calls**: wrk sends the same ``tools/call`` with no payment; each
  answer is the MCP transport's payment-required result (x402srv also stores
  the PENDING challenge its requestId names, as for an HTTP 402);
- **paid calls in a row**: the official ``x402.mcp`` client (``x402MCPSession``
  over the ``mcp`` SDK's Streamable HTTP client) calls the tool ``samples``
  times on one session, each call the unpaid try, the payment signed and the
  paid retry; p50 and p99 per run.

Issue 27 sets no target for this comparison (its 60% is for credit-metered
calls against direct ones: the ``mcp`` scenario); the rows give the ratios and
their spread for information.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.testing.buyers import official_client

from ..stack import Stack
from ..table import Row, Spread, ms, rate, times
from ..wrk import Load, run_wrk
from .mcp import CALL, HEADERS

__all__ = ["run"]

SECTION = "Paid MCP tool calls (official x402.mcp client, facilitator, anvil; 1 worker)"
PRICE = "$0.01"
AMOUNT = 10_000  # PRICE at the token's 6 decimals


@dataclass
class Seller:
    label: str
    url: str  # the MCP endpoint
    unpaid: list[float] = field(default_factory=list)  # req/s per run
    errors: int = 0  # wrk's socket errors (timeouts on a loaded machine)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)


async def _paid_in_a_row(url: str, buyer: LocalAccount, samples: int) -> list[float]:
    """``samples`` paid calls on one session of the official client; ms each."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from x402.mcp import x402MCPSession

    took: list[float] = []
    async with (
        streamable_http_client(url) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        paying = x402MCPSession(session, official_client(buyer))
        await paying.initialize()
        for n in range(samples):
            started = time.perf_counter()
            result = await paying.call_tool("forecast", {"city": f"city-{n}"})
            took.append((time.perf_counter() - started) * 1000)
            if result.is_error or not result.payment_made:
                raise RuntimeError(f"paid call failed at {url}: {result.content}")
    return took


def _percentiles(took: list[float]) -> tuple[float, float]:
    if len(took) < 2:
        return took[0], took[0]
    return statistics.median(took), statistics.quantiles(took, n=100, method="inclusive")[98]


def _measure(
    sellers: list[Seller], buyer: LocalAccount, load: Load, samples: int, runs: int
) -> None:
    share = replace(load, seconds=float(max(1, round(load.seconds / 2))))  # wrk: whole s
    for round_ in range(runs):
        for seller in sellers if round_ % 2 == 0 else list(reversed(sellers)):
            unpaid = run_wrk(seller.url, share, method="POST", body=CALL, headers=HEADERS)
            if not unpaid.statuses_ok:
                raise RuntimeError(f"unpaid calls to {seller.url}: {unpaid.summary()}")
            seller.unpaid.append(unpaid.requests_per_second)
            seller.errors += unpaid.errors
    for seller in sellers:  # warm-up: the client's imports, connections, the first transfer
        asyncio.run(_paid_in_a_row(seller.url, buyer, 2))
    for round_ in range(runs):
        for seller in sellers if round_ % 2 == 0 else list(reversed(sellers)):
            p50, p99 = _percentiles(asyncio.run(_paid_in_a_row(seller.url, buyer, samples)))
            seller.p50.append(p50)
            seller.p99.append(p99)


def run(stack: Stack, load: Load, samples: int, runs: int) -> list[Row]:
    buyer = stack.chain.new_account(eth=0, usdc_atomic=10**12)
    with ThreadPoolExecutor(1) as pool:  # the SDK's server starts while x402srv does
        starting = pool.submit(stack.mcp_official, Account.create().address, AMOUNT)
        upstream = stack.mcp_upstream()
        mcp = [
            {"path": "/mcp", "upstream": f"{upstream}/mcp", "tools": {"forecast": {"price": PRICE}}}
        ]
        server = stack.x402srv(
            stack.config(store="sqlite", settlement="facilitator", mcp=mcp), "mcp-paid"
        )
        official = starting.result()  # (on a failure, Stack.stop stops what did start)
    try:
        sdk = Seller("official SDK wrapper (x402.mcp on the FastMCP tool)", f"{official}/mcp")
        ours = Seller(
            "x402srv MCP gateway (sqlite) in front of the FastMCP server", server.url + "/mcp"
        )
        _measure([sdk, ours], buyer, load, samples, runs)
    finally:
        stack.stop_app(official)
        stack.stop_app(upstream)
        stack.stop_server(server)
    return _rows(sdk, ours, samples)


def _rows(sdk: Seller, ours: Seller, samples: int) -> list[Row]:
    unpaid = Spread.of([o / s for o, s in zip(ours.unpaid, sdk.unpaid, strict=True)])
    paid = Spread.of([o / s for o, s in zip(ours.p50, sdk.p50, strict=True)])
    calls = f"{samples} in a row x {len(sdk.p50)} runs"

    def unpaid_row(seller: Seller) -> str:
        errors = f"  (socket errors {seller.errors})" if seller.errors else ""
        return f"{Spread.of(seller.unpaid).show(rate)} req/s{errors}"

    def paid_row(seller: Seller) -> str:
        return (
            f"p50 {Spread.of(seller.p50).show(ms)} ms  p99 {Spread.of(seller.p99).show(ms)} ms"
            f"  ({calls})"
        )

    return [
        Row(SECTION, f"unpaid tools/call: {sdk.label}", unpaid_row(sdk)),
        Row(
            SECTION,
            f"unpaid tools/call: {ours.label}",
            f"{unpaid_row(ours)}  = {unpaid.show(times)} the SDK's (no target set)",
        ),
        Row(SECTION, f"paid call: {sdk.label}", paid_row(sdk)),
        Row(
            SECTION,
            f"paid call: {ours.label}",
            f"{paid_row(ours)}  p50 = {paid.show(times)} the SDK's (no target set)",
        ),
    ]
