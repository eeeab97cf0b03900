"""``/healthz`` (the process answers) and ``/readyz`` (it can take payments now).

Readiness asks each dependency once, concurrently, with a short timeout:

    store        Store.ping()
    chain        the RPC answers with its latest block (when an RPC is configured;
                 ``chain eip155:<id>`` per network when there are several)
    settlement   every network has a settler ready: each settler's own
                 ``check_ready()`` (the facilitator lists our network; the gas
                 wallet's node answers and its balance covers gas)

The document also lists every settler (``settlers``): its network, its label
(URLs redacted), its check, and its circuit breaker when its network fails
over between several.

Answers name the failing check and a short reason, never a URL or a key. A
server answers from its last checks for ``server.readiness_cache_seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from x402srv.errors import NotReady
from x402srv.interfaces import Store
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.per_network import NetworkSettlers
from x402srv.settlement.readiness import CHECK_TIMEOUT_SECONDS

__all__ = ["Readiness", "readiness"]


async def _check(probe: Callable[[], Awaitable[str | None]]) -> str:
    try:
        problem = await asyncio.wait_for(probe(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return "timed out"
    except Exception as exc:  # a probe that breaks is a dependency that is not ready
        return f"unavailable ({type(exc).__name__})"
    return problem or "ok"


def _chain_probe(chain: ChainReader) -> Callable[[], Awaitable[str | None]]:
    async def probe() -> str | None:
        await chain.latest_block()
        return None

    return probe


#: What ``/readyz`` shows beside its checks without ever failing on it (the refund wallets).
Extras = Callable[[], Awaitable[dict[str, Any]]]


async def readiness(
    store: Store,
    chains: Mapping[str, ChainReader],
    settlers: NetworkSettlers,
    extras: Extras | None = None,
) -> dict[str, Any]:
    """The readiness document; raises ``NotReady`` (503) carrying it when a check fails.

    ``extras`` add keys that inform without deciding (a refund wallet low on tokens
    is a warning: purchases still work).
    """

    async def store_probe() -> str | None:
        await store.ping()
        return None

    probes: dict[str, Callable[[], Awaitable[str | None]]] = {"store": store_probe}
    for network, chain in chains.items():
        probes["chain" if len(chains) == 1 else f"chain {network}"] = _chain_probe(chain)
    states: list[dict[str, Any]] = []

    async def settlement_probe() -> str | None:
        problem, found = await settlers.readiness()
        states.extend(found)
        return problem

    probes["settlement"] = settlement_probe
    results = await asyncio.gather(*(_check(probe) for probe in probes.values()))
    checks = dict(zip(probes, results, strict=True))
    shown = await extras() if extras is not None else {}
    if any(result != "ok" for result in checks.values()):
        failing = ", ".join(name for name, result in checks.items() if result != "ok")
        extra = {"checks": checks, "settlers": states, **shown}
        raise NotReady(f"not ready: {failing}", retry_after=5, extra=extra)
    return {"status": "ready", "checks": checks, "settlers": states, **shown}


class Readiness:
    """``readiness`` answered from its last result for ``cache_seconds``.

    Load balancers and orchestrators probe every second or so, from several
    places; without the cache each probe asked the facilitator and the RPC
    again (a facilitator may rate-limit us for it). Concurrent probes while a
    check runs share that check. A failure is cached like a success.
    """

    def __init__(
        self,
        store: Store,
        chains: Mapping[str, ChainReader],
        settlers: NetworkSettlers,
        *,
        cache_seconds: float,
        extras: Extras | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._args = (store, chains, settlers, extras)
        self._cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._last: tuple[float, asyncio.Future[dict[str, Any]]] | None = None

    async def check(self) -> dict[str, Any]:
        now = self._monotonic()
        if self._last is None or now - self._last[0] >= self._cache_seconds:
            task = asyncio.ensure_future(readiness(*self._args))
            self._last = (now, task)
        return await asyncio.shield(self._last[1])
