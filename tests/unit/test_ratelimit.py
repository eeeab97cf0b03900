"""The unpaid-request limiter and the client key, against real stores with a frozen clock."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.errors import RateLimited, StoreUnavailable
from x402srv.usage.unpaid_limit import LimitOptions, UnpaidLimiter, client_key, forwarded_hop

WINDOW = 60.0
START = 1_700_000_040.0  # the start of a window


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


async def allowed(limiter: UnpaidLimiter, client: str, tries: int) -> int:
    admitted = 0
    for _ in range(tries):
        try:
            await limiter.check(client)
        except RateLimited:
            continue
        admitted += 1
    return admitted


async def test_exactly_the_limit_passes_in_one_process_then_429_until_the_window_ends() -> None:
    clock = Clock()
    limiter = UnpaidLimiter(MemoryStore(), LimitOptions(100, WINDOW), clock)
    assert await allowed(limiter, "203.0.113.7", 150) == 100
    with pytest.raises(RateLimited) as refused:
        await limiter.check("203.0.113.7")
    assert refused.value.status == 429
    assert refused.value.code == "RATE_LIMITED"
    assert refused.value.headers()["Retry-After"] == "60"
    clock.now += 45
    with pytest.raises(RateLimited) as later:
        await limiter.check("203.0.113.7")
    assert later.value.headers()["Retry-After"] == "15"
    assert await allowed(limiter, "203.0.113.8", 5) == 5  # other clients are untouched
    clock.now += 15  # the next window
    assert await allowed(limiter, "203.0.113.7", 150) == 100


async def test_workers_share_the_count_through_the_store(tmp_path: Path) -> None:
    """Two workers (two stores on one sqlite file): together at most limit + their slack."""
    clock = Clock()
    stores = [SqliteStore(tmp_path / "x.db"), SqliteStore(tmp_path / "x.db")]
    for store in stores:
        await store.start()
    try:
        limiters = [UnpaidLimiter(store, LimitOptions(100, WINDOW), clock) for store in stores]
        counts = await asyncio.gather(*(allowed(limiter, "c", 200) for limiter in limiters))
        slack = 2 * (100 // 20)
        assert 100 <= sum(counts) <= 100 + slack, counts
        # the store holds every request both counted, refused ones too
        totals = await stores[0].count_hits(
            {f"unpaid:c:{int(START // WINDOW)}": 0}, window_end=START + WINDOW, now=START
        )
        assert sum(totals.values()) >= sum(counts)
    finally:
        for store in stores:
            await store.close()


class RoundTrip(MemoryStore):
    """A shared store whose answer takes a few turns of the loop, as a real round trip does.

    (In memory so that the interleaving is the same on every run: the other
    requests of the same client go on while a count is on its way.)
    """

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        for _ in range(5):
            await asyncio.sleep(0)
        totals = await super().count_hits(hits, window_end=window_end, now=now)
        for _ in range(5):
            await asyncio.sleep(0)
        return totals


@pytest.mark.parametrize("workers", [1, 2, 3])
async def test_concurrent_requests_while_a_count_is_on_its_way_never_pass_the_limit_s_slack(
    workers: int,
) -> None:
    """32 requests at a time per worker: one worker admits the limit, N add (N - 1) x 5 %.

    Regression: the requests a worker had sent to the store but not yet heard
    back about counted nowhere, and several counts could be on their way at
    once, so a flood with many connections got past the slack (767 of a limit
    of 200 here with two workers; 570 of 500 in the flood test).
    """
    store, clock = RoundTrip(), Clock()
    limit = 200
    limiters = [UnpaidLimiter(store, LimitOptions(limit, WINDOW), clock) for _ in range(workers)]
    counts = await asyncio.gather(
        *(allowed(limiter, "c", 40) for limiter in limiters for _ in range(32))
    )
    assert limit <= sum(counts) <= limit + (workers - 1) * (limit // 20), sum(counts)


async def test_a_store_round_trip_only_every_twentieth_request() -> None:
    class Counting(MemoryStore):
        calls = 0

        async def count_hits(
            self, hits: Mapping[str, int], *, window_end: float, now: float
        ) -> dict[str, int]:
            Counting.calls += 1
            return await super().count_hits(hits, window_end=window_end, now=now)

    limiter = UnpaidLimiter(Counting(), LimitOptions(1000, WINDOW), Clock())
    assert await allowed(limiter, "c", 500) == 500
    assert Counting.calls <= 500 // 50 + 1


async def test_a_client_over_the_limit_costs_no_more_store_writes() -> None:
    class Counting(MemoryStore):
        calls = 0

        async def count_hits(
            self, hits: Mapping[str, int], *, window_end: float, now: float
        ) -> dict[str, int]:
            Counting.calls += 1
            return await super().count_hits(hits, window_end=window_end, now=now)

    limiter = UnpaidLimiter(Counting(), LimitOptions(20, WINDOW), Clock())
    await allowed(limiter, "c", 21)
    before = Counting.calls
    assert await allowed(limiter, "c", 1000) == 0
    assert Counting.calls == before


async def test_an_unreachable_store_leaves_the_limit_to_each_process() -> None:
    """No client under the limit is refused for an outage; the count goes on locally."""

    class Down(MemoryStore):
        async def count_hits(
            self, hits: Mapping[str, int], *, window_end: float, now: float
        ) -> dict[str, int]:
            raise StoreUnavailable("down")

    limiter = UnpaidLimiter(Down(), LimitOptions(3, WINDOW), Clock())
    assert await allowed(limiter, "c", 10) == 3


async def test_requests_at_once_in_an_outage_wait_out_one_failed_count() -> None:
    """32 requests of one client at once while the store is down: each waits out one failed count.

    Regression: a request whose wait ended in a failed count sent a count of its
    own, and the others waited for that one in turn, so the k-th of a client's
    requests at once waited out k of the store's timeouts (2 s each on Redis):
    a client under the limit was kept waiting, not refused, for an outage.
    """

    class Down(MemoryStore):
        """A store that is down: its answer, a round trip later, is StoreUnavailable.

        (An outage cannot be real in memory; the turns of the loop stand for the
        timeout after which a real store's client gives up.)
        """

        failed = 0

        async def count_hits(
            self, hits: Mapping[str, int], *, window_end: float, now: float
        ) -> dict[str, int]:
            for _ in range(5):
                await asyncio.sleep(0)
            Down.failed += 1
            raise StoreUnavailable("down")

    limiter = UnpaidLimiter(Down(), LimitOptions(100, WINDOW), Clock())

    async def failed_counts_waited() -> int:
        before = Down.failed
        await limiter.check("c")  # under the limit: never refused
        return Down.failed - before

    waited = await asyncio.gather(*(failed_counts_waited() for _ in range(32)))
    assert max(waited) == 1, waited


@pytest.mark.parametrize(
    ("address", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        (" 198.51.100.7 ", "198.51.100.7"),
        ("198.51.100.7:5555", "198.51.100.7"),  # a port a proxy wrote is dropped
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),  # IPv6 per /64
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("[2001:db8::1]", "2001:db8::/64"),
        ("[2001:db8::1]:443", "2001:db8::/64"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("not-an-address", "not-an-address"),
        ("x" * 100, "x" * 64),
        ("", None),
        (None, None),
    ],
)
def test_client_key(address: str | None, key: str | None) -> None:
    assert client_key(address) == key


@pytest.mark.parametrize(
    ("lines", "hops", "hop"),
    [
        (["198.51.100.7"], 1, "198.51.100.7"),
        (["10.9.9.9, 198.51.100.7"], 1, "198.51.100.7"),  # the client wrote 10.9.9.9
        (["10.9.9.9, 198.51.100.7, 10.0.0.1"], 2, "198.51.100.7"),
        (["10.9.9.9", "198.51.100.7"], 1, "198.51.100.7"),  # two lines are one list
        (["10.9.9.9,, 198.51.100.7 ,"], 1, "198.51.100.7"),  # empty entries skipped
        (["198.51.100.7"], 2, None),  # fewer entries than proxies: the peer counts
        ([], 1, None),
        ([""], 1, None),
        (["for=10.9.9.9, for=198.51.100.7;proto=https"], 1, "198.51.100.7"),  # RFC 7239
        (['for="[2001:db8::1]:4711";proto=http'], 1, "[2001:db8::1]:4711"),
        (["by=10.0.0.1"], 1, "by=10.0.0.1"),  # no for=: as written, by the proxy
    ],
)
def test_forwarded_hop_counts_from_the_right(lines: list[str], hops: int, hop: str | None) -> None:
    assert forwarded_hop(lines, hops) == hop
