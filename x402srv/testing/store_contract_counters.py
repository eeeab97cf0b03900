"""The store contract on shared hit counters (``Store.count_hits``).

The unpaid-request limit counts each client's requests per time window in the
store, so every worker and every instance adds to the same number (``RATE_LIMITED``,
docs/errors.md). A hit must never be lost or counted twice, however many
calls race (each caller sees a total of its own), and the counters of windows
that ended must not pile up. The contract pins one reading of "the store may
forget a counter whose ``window_end`` is before ``now``" for every store: such
a counter counts from zero again, whether or not it was already deleted.
"""

from __future__ import annotations

import asyncio

from x402srv.interfaces import Store
from x402srv.testing.builders import BASE_TIME
from x402srv.testing.store_contract_base import RACERS, StoreContractBase

__all__ = ["CounterContract"]

#: The end of the window the tests count in, one minute after ``BASE_TIME``.
END = BASE_TIME + 60


class CounterContract(StoreContractBase):
    """Part of ``StoreContract``: ``count_hits``."""

    async def test_no_keys_count_nothing(self, store: Store) -> None:
        assert await store.count_hits({}, window_end=END, now=BASE_TIME) == {}

    async def test_counts_add_up_per_key(self, store: Store) -> None:
        first = await store.count_hits({"a": 1, "b": 5}, window_end=END, now=BASE_TIME)
        assert first == {"a": 1, "b": 5}
        assert await store.count_hits({"a": 2}, window_end=END, now=BASE_TIME + 1) == {"a": 3}
        then = await store.count_hits({"b": 1, "c": 1, "a": 0}, window_end=END, now=BASE_TIME + 2)
        assert then == {"b": 6, "c": 1, "a": 3}

    async def test_keys_are_kept_apart_exactly(self, store: Store) -> None:
        """Keys the core builds from a client and a window number, and long printable ones."""
        keys = [
            "unpaid:203.0.113.7:28741302",
            "unpaid:203.0.113.7:28741303",
            "unpaid:203.0.113.7:2874130",
            "unpaid:2001:db8::7:28741302",
            "Unpaid:203.0.113.7:28741302",
            "unpaid ☃ é:" + "x" * 190,
        ]
        hits = {key: i + 1 for i, key in enumerate(keys)}
        assert await store.count_hits(hits, window_end=END, now=BASE_TIME) == hits
        doubled = {key: 2 * n for key, n in hits.items()}
        assert await store.count_hits(hits, window_end=END, now=BASE_TIME) == doubled

    async def test_a_counter_starts_again_once_its_window_ended(self, store: Store) -> None:
        assert await store.count_hits({"k": 3}, window_end=END, now=BASE_TIME) == {"k": 3}
        assert await store.count_hits({"k": 1}, window_end=END, now=END) == {"k": 4}
        next_end = END + 60
        assert await store.count_hits({"k": 1}, window_end=next_end, now=END + 0.5) == {"k": 1}
        assert await store.count_hits({"k": 1}, window_end=next_end, now=END + 1) == {"k": 2}

    async def test_counters_of_ended_windows_are_forgotten(self, store: Store) -> None:
        """Another key's call in a later window does not revive what an old window counted."""
        old = {f"old-{i}": 5 for i in range(10)}
        assert await store.count_hits(old, window_end=END, now=BASE_TIME) == old
        later = END + 30
        assert await store.count_hits({"new": 1}, window_end=later + 30, now=later) == {"new": 1}
        again = await store.count_hits(dict.fromkeys(old, 1), window_end=later + 30, now=later)
        assert again == dict.fromkeys(old, 1)

    async def test_racing_counts_are_never_lost(self, sharing: tuple[Store, Store]) -> None:
        """Calls over two instances (one when nothing is shared): each sees its own total."""
        calls = [
            sharing[i % 2].count_hits(
                {"shared": 1, "pair": 2, f"own-{i}": 1}, window_end=END, now=BASE_TIME
            )
            for i in range(RACERS)
        ]
        results = await asyncio.gather(*calls)
        assert sorted(result["shared"] for result in results) == list(range(1, RACERS + 1))
        assert sorted(result["pair"] for result in results) == list(range(2, 2 * RACERS + 1, 2))
        assert all(result[f"own-{i}"] == 1 for i, result in enumerate(results))
        for store in sharing:
            total = await store.count_hits({"shared": 0}, window_end=END, now=BASE_TIME + 1)
            assert total == {"shared": RACERS}
