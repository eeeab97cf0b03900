"""The store contract on the counters: ``add_counts`` and ``read_counts``.

Every x402srv process counts what it answers (402s, challenges, payments,
settlements, revenue per plan) in memory and adds its counts to the store's
per-hour buckets in one call every few seconds (``x402srv.usage.counters``); the
seller's console reads a range of buckets. A count must never be lost or
added twice however many processes add at once, buckets outside the range
must not show, and old buckets must not pile up.
"""

from __future__ import annotations

import asyncio

from x402srv.interfaces import Store
from x402srv.testing.store_contract_base import RACERS, StoreContractBase

__all__ = ["CountsContract"]

HOUR = 3600
#: An hour's start (2023-11-14T22:00:00Z), as the counters make buckets.
T0 = 1_699_999_200


class CountsContract(StoreContractBase):
    """Part of ``StoreContract``: ``add_counts``, ``read_counts``."""

    async def test_nothing_counted_reads_nothing(self, store: Store) -> None:
        assert await store.read_counts(start=T0, end=T0 + 24 * HOUR) == {}
        await store.add_counts({}, forget_before=0)
        assert await store.read_counts(start=T0, end=T0 + 24 * HOUR) == {}

    async def test_counts_add_up_per_bucket_and_name(self, store: Store) -> None:
        await store.add_counts(
            {(T0, "offer.challenge"): 3, (T0, "settled:hourly"): 1}, forget_before=0
        )
        await store.add_counts(
            {(T0, "offer.challenge"): 2, (T0 + HOUR, "offer.challenge"): 7}, forget_before=0
        )
        assert await store.read_counts(start=T0, end=T0 + 2 * HOUR) == {
            (T0, "offer.challenge"): 5,
            (T0, "settled:hourly"): 1,
            (T0 + HOUR, "offer.challenge"): 7,
        }

    async def test_a_range_is_half_open(self, store: Store) -> None:
        counts = {(T0 + i * HOUR, "n"): i + 1 for i in range(5)}
        await store.add_counts(counts, forget_before=0)
        assert await store.read_counts(start=T0 + HOUR, end=T0 + 3 * HOUR) == {
            (T0 + HOUR, "n"): 2,
            (T0 + 2 * HOUR, "n"): 3,
        }
        assert await store.read_counts(start=T0 + 5 * HOUR, end=T0 + 9 * HOUR) == {}
        assert await store.read_counts(start=T0, end=T0) == {}

    async def test_names_are_kept_apart_exactly(self, store: Store) -> None:
        """Names the counters build: plan, network, asset and amount, reasons, settlers."""
        names = [
            "settled:hourly|eip155:84532|0x036CbD53842c5426634e7929541eC2318f3dCF7e|100000",
            "settled:hourly|eip155:84532|0x036cbd53842c5426634e7929541ec2318f3dcf7e|100000",
            "failed:invalid_exact_evm_payload_signature",
            "settler:gas-wallet:settled",
            "settler:gas-wallet:ms",
            "plan ☃ é",
        ]
        counts = {(T0, name): i + 1 for i, name in enumerate(names)}
        await store.add_counts(counts, forget_before=0)
        await store.add_counts({(T0, names[4]): 10**12}, forget_before=0)
        expected = dict(counts)
        expected[(T0, names[4])] += 10**12
        assert await store.read_counts(start=T0, end=T0 + 1) == expected

    async def test_old_buckets_are_forgotten(self, store: Store) -> None:
        """Every call may forget some buckets before ``forget_before``; a few calls forget all."""
        old = {(T0 + i * HOUR, "n"): 1 for i in range(3)}
        await store.add_counts(old, forget_before=0)
        later = T0 + 100 * HOUR
        for _ in range(3):
            await store.add_counts({(later, "n"): 1}, forget_before=T0 + 50 * HOUR)
        assert await store.read_counts(start=T0, end=later + HOUR) == {(later, "n"): 3}

    async def test_racing_adds_are_never_lost(self, sharing: tuple[Store, Store]) -> None:
        """Adds over two instances (one when nothing is shared) all land."""
        calls = [
            sharing[i % 2].add_counts(
                {(T0, "shared"): 1, (T0 + HOUR, "pair"): 2, (T0, f"own-{i}"): 1},
                forget_before=0,
            )
            for i in range(RACERS)
        ]
        await asyncio.gather(*calls)
        for store in sharing:
            counts = await store.read_counts(start=T0, end=T0 + 2 * HOUR)
            assert counts[(T0, "shared")] == RACERS
            assert counts[(T0 + HOUR, "pair")] == 2 * RACERS
            assert all(counts[(T0, f"own-{i}")] == 1 for i in range(RACERS))
