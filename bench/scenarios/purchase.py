"""Paid purchases end to end through the official ``x402`` client on anvil.

x402srv: ``POST /x402/access {"planId": "hourly"}`` with the SDK's httpx
transport, which gets the 402, signs the EIP-3009 authorization and retries;
the answer is the AccessGrant after settlement (gas wallet, or the local
facilitator). The official middleware: ``GET /weather`` with the same client
(402, sign, retry, settled through the same facilitator). Each buyer keeps its
connection, as an agent would. Latency is measured one purchase at a time,
taking turns between the servers (official; x402srv with the gas wallet on
sqlite, Redis and PostgreSQL, and with the facilitator on sqlite) so that a
chain or facilitator that slows down as blocks pile up weighs on all of them
alike; throughput with 20 buyers buying at once, one server after the other.

Target (issue 16): the p50 of a purchase on any store within 3 ms of sqlite's.
Durability decides most of that gap, so two more rows show each side's other
setting: sqlite with ``synchronous = FULL`` (a flush per commit, as PostgreSQL's
default) and PostgreSQL with ``synchronous_commit = off`` (no flush before the
answer, as sqlite's default ``NORMAL``); each store is judged against sqlite's
default (the target) and, when that differs, against the sqlite row of the
same durability too.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

from ..stack import Stack
from ..table import Row, Verdict, verdict

__all__ = ["PurchaseFigures", "run"]

SECTION = "Paid purchase end to end (official x402 client, anvil)"
CONCURRENT_BUYERS = 20

Buy = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float
    samples: int
    per_second: float  # purchases completed per second with CONCURRENT_BUYERS at once


@dataclass(frozen=True)
class Setup:
    """One x402srv server of the comparison: how it settles, its store and store options."""

    strategy: str
    store: str
    options: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        tuned = "".join(f", {key} = {value}" for key, value in self.options)
        return f"{self.strategy}, {self.store}{tuned}"

    @property
    def flushes(self) -> bool:
        """Whether each commit is flushed to disk before the answer."""
        settings = dict(self.options)
        if self.store == "sqlite":
            return settings.get("synchronous") == "FULL"
        if self.store == "postgres":
            return settings.get("synchronous_commit", "on") != "off"
        return False  # Redis with appendfsync everysec (the bench's server)


@dataclass(frozen=True)
class PurchaseFigures:
    official: Latency
    ours: dict[Setup, Latency]


#: Within this many ms of sqlite's p50, a store's purchase p50 passes.
STORE_P50_MARGIN_MS = 3.0


def _percentiles(times: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(times, n=100, method="inclusive")
    return statistics.median(times), cuts[98]


async def _interleaved(buys: list[Buy], buyer: LocalAccount, rounds: int) -> list[list[float]]:
    """``rounds`` purchases from each server, one at a time, taking turns; ms per purchase."""
    times: list[list[float]] = [[] for _ in buys]
    clients = [paying_client(buyer)[0] for _ in buys]
    try:
        for _ in range(rounds):
            for index, (buy, http) in enumerate(zip(buys, clients, strict=True)):
                started = time.perf_counter()
                response = await buy(http)
                times[index].append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"purchase failed: {response.status_code} {response.text}")
    finally:
        for http in clients:
            await http.aclose()
    return times


async def _concurrent(buy: Buy, buyers: list[LocalAccount], each: int) -> float:
    async def one(buyer: LocalAccount) -> None:
        http, _ = paying_client(buyer)
        async with http:
            for _ in range(each):
                response = await buy(http)
                if response.status_code != 200:
                    raise RuntimeError(f"purchase failed: {response.status_code} {response.text}")

    started = time.perf_counter()
    await asyncio.gather(*(one(buyer) for buyer in buyers))
    return len(buyers) * each / (time.perf_counter() - started)


def _measure(stack: Stack, buys: list[Buy], samples: int, each: int) -> list[Latency]:
    buyers = [stack.chain.new_account(eth=0, usdc_atomic=10**12) for _ in range(CONCURRENT_BUYERS)]
    asyncio.run(_interleaved(buys, buyers[0], 3))  # warm-up: connections, caches
    times = asyncio.run(_interleaved(buys, buyers[0], samples))
    figures = []
    for buy, measured in zip(buys, times, strict=True):
        rate = asyncio.run(_concurrent(buy, buyers, each))
        p50, p99 = _percentiles(measured)
        figures.append(Latency(p50, p99, samples, rate))
    return figures


def _get(url: str) -> Buy:
    def buy(http: httpx.AsyncClient) -> Awaitable[httpx.Response]:
        return http.get(url)

    return buy


def _purchase(url: str) -> Buy:
    def buy(http: httpx.AsyncClient) -> Awaitable[httpx.Response]:
        return http.post(url, json={"planId": "hourly"})

    return buy


def _figures(latency: Latency) -> str:
    return (
        f"p50 {latency.p50_ms:6.1f} ms  p99 {latency.p99_ms:6.1f} ms "
        f"({latency.samples} one at a time)  {latency.per_second:6.1f} purchases/s "
        f"({CONCURRENT_BUYERS} buyers at once)"
    )


def _setups(stack: Stack) -> list[Setup]:
    setups = [Setup("gas-wallet", "sqlite"), Setup("facilitator", "sqlite")]
    setups += [Setup("gas-wallet", store) for store in stack.stores if store != "sqlite"]
    setups.append(Setup("gas-wallet", "sqlite", (("synchronous", "FULL"),)))
    if "postgres" in stack.stores:
        setups.append(Setup("gas-wallet", "postgres", (("synchronous_commit", "off"),)))
    return setups


def _judged(
    setup: Setup, latency: Latency, ours: dict[Setup, Latency], official: Latency
) -> tuple[Verdict, ...]:
    judged = [
        verdict(
            "p50 <= official paid request p50",
            latency.p50_ms <= official.p50_ms,
            f"{latency.p50_ms:.1f} vs {official.p50_ms:.1f} ms",
        )
    ]
    if setup.strategy == "gas-wallet" and setup != Setup("gas-wallet", "sqlite"):
        sqlite = Setup("gas-wallet", "sqlite")
        alike = next(
            s
            for s in ours
            if s.store == "sqlite" and s.strategy == "gas-wallet" and s.flushes == setup.flushes
        )
        for other in dict.fromkeys((sqlite, alike)):  # the target, then like for like
            if other == setup:
                continue
            gap = latency.p50_ms - ours[other].p50_ms
            judged.append(
                verdict(
                    f"p50 within {STORE_P50_MARGIN_MS:g} ms of {other.label}",
                    gap <= STORE_P50_MARGIN_MS,
                    f"{gap:+.1f} ms",
                )
            )
    return tuple(judged)


def run(stack: Stack, samples: int, each: int) -> tuple[PurchaseFigures, list[Row]]:
    setups = _setups(stack)
    official_url = stack.official(Account.create().address)
    servers: list[ServerProcess] = []
    try:
        for setup in setups:
            config = stack.config(
                store=setup.store, settlement=setup.strategy, store_options=dict(setup.options)
            )
            name = f"purchase-{setup.strategy}-{setup.store}-{len(servers)}"
            servers.append(stack.x402srv(config, name))
        buys = [_get(f"{official_url}/weather")] + [_purchase(s.access_url) for s in servers]
        official, *mine = _measure(stack, buys, samples, each)
    finally:
        stack.stop_app(official_url)
        for server in servers:
            stack.stop_server(server)
    ours = dict(zip(setups, mine, strict=True))
    rows = [Row(SECTION, "official x402 middleware, one paid request", _figures(official))]
    for setup, latency in ours.items():
        rows.append(
            Row(
                SECTION,
                f"x402srv {setup.label}, one purchase",
                _figures(latency) + f"  p50 = {latency.p50_ms / official.p50_ms:.2f}x official",
                _judged(setup, latency, ours, official),
            )
        )
    return PurchaseFigures(official, ours), rows
