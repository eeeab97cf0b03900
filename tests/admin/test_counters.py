"""The counters: a dict increment per event, flushed to the store's hourly counters.

The property the issue asks for is tested end to end first: a flood of unpaid
probes moves counters, not rows (the store holds no more records after it
than before), and the counts of a purchase land in the right hour.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

import pytest

from x402srv.access.records import RecordChanges, State
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.errors import StoreUnavailable
from x402srv.interfaces import Store
from x402srv.testing.builders import BASE_TIME, make_record
from x402srv.usage.counters import HOUR, MAX_REASONS, Counters, clean, hour_of


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Down(MemoryStore):
    """A store whose counters cannot be reached (until ``up``): the counts must wait."""

    def __init__(self) -> None:
        super().__init__()
        self.up = False

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        if not self.up:
            raise StoreUnavailable("down for the test")
        await super().add_counts(counts, forget_before=forget_before)


async def _everything(store: Store) -> dict[tuple[int, str], int]:
    return await store.read_counts(start=0, end=2**40)


async def test_an_unpaid_probe_flood_moves_counters_not_rows(tmp_path: Path) -> None:
    """490 probes (the seller who counted them by hand) add one counter, and no record."""
    from x402srv.default_plugins.sqlite.store import SqliteStore

    store = SqliteStore(tmp_path / "flood.db")
    await store.start()
    try:
        clock = Clock(BASE_TIME)
        counters = Counters(store, clock)
        for _ in range(490):
            counters.add("unpaid")
        await counters.flush()
        assert await store.list_challenges(limit=1000) == []
        assert await _everything(store) == {(hour_of(BASE_TIME), "unpaid"): 490}
    finally:
        await store.close()


async def test_counts_go_to_the_hour_they_happened_in() -> None:
    store, clock = MemoryStore(), Clock(BASE_TIME)
    counters = Counters(store, clock)
    counters.add("unpaid", 2)
    clock.now += HOUR
    counters.add("unpaid")
    counters.add("challenge:hourly")
    await counters.flush()
    hour = hour_of(BASE_TIME)
    assert await _everything(store) == {
        (hour, "unpaid"): 2,
        (hour + HOUR, "unpaid"): 1,
        (hour + HOUR, "challenge:hourly"): 1,
    }
    await counters.flush()  # nothing new: nothing added twice
    assert (await _everything(store))[(hour, "unpaid")] == 2


async def test_settled_and_delivered_come_from_the_transitions() -> None:
    """SETTLING -> PAID and PAID -> DELIVERED count; PAID -> PAID and a revocation do not."""
    store, clock = MemoryStore(), Clock(BASE_TIME)
    counters = Counters(store, clock)
    record = make_record(plan_id="daily", amount="1500000")
    steps = [State.SETTLING, State.PAID, State.PAID, State.DELIVERED, State.DELIVERED]
    for state in steps:
        record = record.apply(RecordChanges(), state, BASE_TIME, "a move")
        counters.observe(record)
    await counters.flush()
    hour = hour_of(BASE_TIME)
    name = f"settled:daily|{record.network}|{record.asset}|1500000"
    assert await _everything(store) == {(hour, name): 1, (hour, "delivered:daily"): 1}


async def test_counts_wait_for_a_store_that_is_down() -> None:
    store, clock = Down(), Clock(BASE_TIME)
    counters = Counters(store, clock)
    counters.add("unpaid", 3)
    await counters.flush()  # logged, kept
    counters.add("unpaid", 1)
    store.up = True
    await counters.flush()
    assert await _everything(store) == {(hour_of(BASE_TIME), "unpaid"): 4}


async def test_failure_reasons_are_cleaned_and_bounded() -> None:
    store, clock = MemoryStore(), Clock(BASE_TIME)
    counters = Counters(store, clock)
    counters.failed("Facilitator said: <script>alert(1)</script> " + "x" * 500)
    for i in range(MAX_REASONS + 10):
        counters.failed(f"reason {i}")
    await counters.flush()
    names = {name for _, name in await _everything(store)}
    assert all(len(name) <= len("failed:") + 64 for name in names)
    assert all(
        set(name[len("failed:") :]) <= set("abcdefghijklmnopqrstuvwxyz0123456789_.:-")
        for name in names
    )
    assert len(names) == MAX_REASONS + 1  # the first MAX_REASONS, then "other"
    counts = await _everything(store)
    assert counts[(hour_of(BASE_TIME), "failed:other")] == 11


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("invalid_exact_evm_payload_signature", "invalid_exact_evm_payload_signature"),
        ("Transaction Failed!", "transaction_failed_"),
        ("", "unknown"),
        ("☃", "_"),
    ],
)
def test_clean(text: str, cleaned: str) -> None:
    assert clean(text) == cleaned


async def test_old_buckets_are_forgotten_by_the_next_flush() -> None:
    store, clock = MemoryStore(), Clock(BASE_TIME)
    counters = Counters(store, clock, keep_seconds=10 * HOUR)
    counters.add("unpaid")
    await counters.flush()
    clock.now += 20 * HOUR
    counters.add("unpaid")
    await counters.flush()
    assert await _everything(store) == {(hour_of(clock.now), "unpaid"): 1}


class Slow(MemoryStore):
    """A store whose counters answer only once ``go`` is set: a flush stays under way."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()
        self.waiting = asyncio.Event()

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        self.waiting.set()
        await self.go.wait()
        await super().add_counts(counts, forget_before=forget_before)


async def test_a_flush_waits_for_the_flush_under_way_before_its_caller_reads() -> None:
    """Regression: the console flushes this process's counts, then reads the store. With the
    background flush on its way to a networked store (Redis, PostgreSQL), the counts were
    out of this process and not in the store yet: the console's flush found nothing to do,
    returned, and the figures it read missed them."""
    store = Slow()
    counters = Counters(store, Clock(BASE_TIME))
    counters.add("settled:hourly")
    background = asyncio.create_task(counters.flush())
    await store.waiting.wait()  # its counts are taken, its add is on the way

    console = asyncio.create_task(counters.flush())
    await asyncio.sleep(0)
    assert not console.done(), "the console's flush returned before the counts were stored"
    store.go.set()
    await asyncio.gather(background, console)

    assert await _everything(store) == {(hour_of(BASE_TIME), "settled:hourly"): 1}
