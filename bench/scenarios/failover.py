"""What a failover costs a buyer: one purchase through one good facilitator, and past a bad one.

Three x402srv servers on the same chain and store (sqlite), each with a
``[[networks]]`` list of facilitators ending with the bench's good one (the
official SDK's facilitator code):

    good                 the good facilitator alone
    refused, then good   first a URL where nothing listens (the connection is refused)
    500, then good       first a facilitator process that answers every /settle with
                         HTTP 500 before doing anything (nothing broadcast)

The official x402 client buys the hourly plan one purchase at a time, taking
turns between the servers (a chain that slows down weighs on all alike). The
breakers are set never to open (``failures`` far above the samples), so every
purchase of the second and third server pays the full failover: this is its
cost, not the breaker's saving. A figure for the closing note, measured, not
judged.
"""

from __future__ import annotations

import asyncio
from typing import Any

from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import free_port

from ..stack import Stack
from ..table import Row
from .purchase import _interleaved, _percentiles, _purchase

__all__ = ["run"]

SECTION = "Purchase with a failing first facilitator (official x402 client, sqlite, anvil)"


def _networks(stack: Stack, urls: list[str]) -> list[dict[str, Any]]:
    chain = stack.chain
    token = chain.token
    return [
        {
            "network": chain.network,
            "rpc_url": chain.rpc_url,
            "tokens": [
                {
                    "asset": token.address,
                    "name": token.name,
                    "version": token.version,
                    "decimals": token.decimals,
                }
            ],
            "settlers": [{"facilitator_url": url} for url in urls],
        }
    ]


def _config(stack: Stack, urls: list[str]) -> dict[str, Any]:
    config = stack.config(store="sqlite", settlement="facilitator")
    seller = dict(config["seller"])
    del seller["network"]
    del config["network"]
    config["seller"] = seller
    config["networks"] = _networks(stack, urls)
    config["settlement"] = {"circuit_breaker": {"failures": 1000}}  # never skip: measure it all
    return config


def run(stack: Stack, samples: int) -> list[Row]:
    good = stack.facilitator.url
    signer = stack.chain.new_account(eth=1000, usdc_atomic=0)
    broken = FacilitatorProcess(
        stack.chain,
        "0x" + bytes(signer.key).hex(),
        stack.directory / "facilitator-500.log",
        "settle-500",
    )
    try:
        setups = {
            "good facilitator only": [good],
            "first refuses the connection": [f"http://127.0.0.1:{free_port()}", good],
            "first answers 500": [broken.url, good],
        }
        servers = {
            name: stack.x402srv(_config(stack, urls), f"failover-{n}")
            for n, (name, urls) in enumerate(setups.items())
        }
        buys = [_purchase(server.access_url) for server in servers.values()]
        buyer = stack.chain.new_account(eth=0, usdc_atomic=10**12)
        asyncio.run(_interleaved(buys, buyer, 3))  # warm-up: connections, caches
        times = asyncio.run(_interleaved(buys, buyer, samples))
        rows = []
        baseline = None
        for name, measured in zip(servers, times, strict=True):
            p50, p99 = _percentiles(measured)
            baseline = baseline if baseline is not None else p50
            extra = "" if name == "good facilitator only" else f"  ({p50 - baseline:+.1f} ms p50)"
            figures = f"p50 {p50:6.1f} ms  p99 {p99:6.1f} ms ({samples} one at a time){extra}"
            rows.append(Row(SECTION, name, figures))
        for server in servers.values():
            stack.stop_server(server)
        return rows
    finally:
        broken.stop()
