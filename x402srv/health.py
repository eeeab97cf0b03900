"""``/healthz`` (the process answers) and ``/readyz`` (it can take payments now).

Readiness asks each dependency once, concurrently, with a short timeout:

    store        Store.ping()
    chain        the RPC answers with its latest block (when an RPC is configured)
    settlement   the settler's own ``check_ready()`` when it has one: the
                 facilitator lists our network; the gas wallet's node answers
                 and its balance covers gas

Answers name the failing check and a short reason, never a URL or a key. A
server answers from its last checks for ``server.readiness_cache_seconds``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .chain import ChainReader
from .errors import NotReady
from .interfaces import Settler, Store

__all__ = ["Readiness", "readiness"]

CHECK_TIMEOUT_SECONDS = 3.0


async def _check(probe: Callable[[], Awaitable[str | None]]) -> str:
    try:
        problem = await asyncio.wait_for(probe(), CHECK_TIMEOUT_SECONDS)
    except TimeoutError:
        return "timed out"
    except Exception as exc:  # a probe that breaks is a dependency that is not ready
        return f"unavailable ({type(exc).__name__})"
    return problem or "ok"


async def readiness(store: Store, chain: ChainReader | None, settler: Settler) -> dict[str, Any]:
    """The readiness document; raises ``NotReady`` (503) carrying it when a check fails."""

    async def store_probe() -> str | None:
        await store.ping()
        return None

    async def chain_probe() -> str | None:
        assert chain is not None
        await chain.latest_block()
        return None

    probes: dict[str, Callable[[], Awaitable[str | None]]] = {"store": store_probe}
    if chain is not None:
        probes["chain"] = chain_probe
    settler_probe = getattr(settler, "check_ready", None)
    if callable(settler_probe):
        probes["settlement"] = settler_probe
    results = await asyncio.gather(*(_check(probe) for probe in probes.values()))
    checks = dict(zip(probes, results, strict=True))
    if any(result != "ok" for result in checks.values()):
        failing = ", ".join(name for name, result in checks.items() if result != "ok")
        raise NotReady(f"not ready: {failing}", retry_after=5, extra={"checks": checks})
    return {"status": "ready", "checks": checks}


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
        chain: ChainReader | None,
        settler: Settler,
        *,
        cache_seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._args = (store, chain, settler)
        self._cache_seconds = cache_seconds
        self._monotonic = monotonic
        self._last: tuple[float, asyncio.Future[dict[str, Any]]] | None = None

    async def check(self) -> dict[str, Any]:
        now = self._monotonic()
        if self._last is None or now - self._last[0] >= self._cache_seconds:
            task = asyncio.ensure_future(readiness(*self._args))
            self._last = (now, task)
        return await asyncio.shield(self._last[1])
