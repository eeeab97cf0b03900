"""``/readyz`` answers from its last checks for a few seconds instead of asking every time."""

from __future__ import annotations

import asyncio

import pytest

from x402srv.config.models import SettlerConfig, SettlerSpec
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.errors import NotReady
from x402srv.plugin import BaseSettler
from x402srv.server.health import Readiness
from x402srv.settlement.per_network import NetworkSettlers

NETWORK = "eip155:84532"
LABEL = "counting #1 on eip155:84532"


class CountingSettler(BaseSettler):
    """A settler whose readiness probe counts its calls (and can be made to fail)."""

    name = "counting"

    def __init__(self) -> None:
        self.probes = 0
        self.problem: str | None = None

    async def check_ready(self) -> str | None:
        self.probes += 1
        await asyncio.sleep(0)
        return self.problem


def _of(settler: CountingSettler) -> NetworkSettlers:
    spec = SettlerSpec(NETWORK, 1, 1, "settlement", SettlerConfig(strategy="counting"), LABEL)
    return NetworkSettlers({NETWORK: settler}, {NETWORK: spec})


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_checks_are_cached_then_asked_again() -> None:
    settler, clock = CountingSettler(), Monotonic()
    ready = Readiness(MemoryStore(), {}, _of(settler), cache_seconds=2.0, monotonic=clock)
    answers = await asyncio.gather(*(ready.check() for _ in range(10)))
    assert settler.probes == 1, "concurrent probes share one check"
    assert answers[0] == {
        "status": "ready",
        "checks": {"store": "ok", "settlement": "ok"},
        "settlers": [{"network": NETWORK, "settler": LABEL, "check": "ok", "breaker": None}],
    }
    clock.now += 1.9
    await ready.check()
    assert settler.probes == 1
    clock.now += 0.2
    await ready.check()
    assert settler.probes == 2


async def test_a_failure_is_cached_too_and_clears_when_the_dependency_is_back() -> None:
    settler, clock = CountingSettler(), Monotonic()
    ready = Readiness(MemoryStore(), {}, _of(settler), cache_seconds=2.0, monotonic=clock)
    settler.problem = "facilitator unreachable (ConnectError)"
    for _ in range(3):
        with pytest.raises(NotReady) as failed:
            await ready.check()
        assert failed.value.extra["checks"]["settlement"] == settler.problem
        assert failed.value.extra["settlers"][0]["check"] == settler.problem
    assert settler.probes == 1
    settler.problem = None
    clock.now += 2.0
    assert (await ready.check())["status"] == "ready"


async def test_zero_seconds_asks_every_time() -> None:
    settler, clock = CountingSettler(), Monotonic()
    ready = Readiness(MemoryStore(), {}, _of(settler), cache_seconds=0.0, monotonic=clock)
    for _ in range(3):
        await ready.check()
    assert settler.probes == 3
