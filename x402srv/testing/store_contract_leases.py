"""The store contract on taking a lease over from a dead holder (``LeaseTakeoverStore``).

A lease's holder can die without releasing it; the gas wallet then sees that the
process holding its nonce lease on this host is gone and takes the lease over at
once instead of waiting for its TTL (docs/scaling.md). That is only safe if the
takeover is a compare-and-set on the holder and fence the caller read: two
waiters that both saw the dead holder must not both get the lease, and a lease
that moved meanwhile (released, taken after it expired) must stay where it is.
A store without these methods skips these tests: its leases pass on only once
they expire.
"""

from __future__ import annotations

import asyncio

import pytest

from x402srv.interfaces import Lease, LeaseTakeoverStore, Store
from x402srv.testing.builders import BASE_TIME
from x402srv.testing.store_contract_base import RACERS, StoreContractBase

__all__ = ["LeaseTakeoverContract"]

NAME = "gas-wallet-nonce:1:0xwallet"


def _takeover(store: Store) -> LeaseTakeoverStore:
    if not isinstance(store, LeaseTakeoverStore):
        pytest.skip(f"the store {store.name!r} cannot take a lease over (not a LeaseTakeoverStore)")
    return store


async def _held_by_dead(store: Store) -> Lease:
    """A lease whose holder left a value once, then took it again and died holding it."""
    first = await store.acquire_lease(NAME, "dead-1", 30, BASE_TIME)
    assert first is not None
    assert await store.release_lease(first, "nonce=7") is True
    held = await store.acquire_lease(NAME, "dead-2", 30, BASE_TIME + 1)
    assert held == Lease(NAME, "dead-2", 2, BASE_TIME + 31, "nonce=7")
    return held


class LeaseTakeoverContract(StoreContractBase):
    """Part of ``StoreContract``: ``held_lease`` and ``take_over_lease``."""

    async def test_held_lease_names_the_holder_only_while_it_holds(self, store: Store) -> None:
        takeover = _takeover(store)
        assert await takeover.held_lease(NAME, BASE_TIME) is None  # never taken
        lease = await store.acquire_lease(NAME, "worker-1", 30, BASE_TIME)
        assert lease is not None
        assert await takeover.held_lease(NAME, BASE_TIME + 29.9) == lease
        assert await takeover.held_lease(NAME, BASE_TIME + 30) is None  # expired
        assert await store.release_lease(lease, "nonce=1") is True
        assert await takeover.held_lease(NAME, BASE_TIME + 1) is None  # released

    async def test_take_over_hands_a_dead_holders_lease_on_at_once(self, store: Store) -> None:
        takeover = _takeover(store)
        held = await _held_by_dead(store)
        assert await takeover.held_lease(NAME, BASE_TIME + 2) == held
        taken = await takeover.take_over_lease(held, "worker-3", 30, BASE_TIME + 2)
        # As acquire_lease would: the next fence, the value left, a fresh expiry.
        assert taken == Lease(NAME, "worker-3", 3, BASE_TIME + 32, "nonce=7")
        assert await takeover.held_lease(NAME, BASE_TIME + 3) == taken
        assert await store.acquire_lease(NAME, "worker-4", 30, BASE_TIME + 3) is None
        assert await store.release_lease(held, "nonce=99") is False  # the dead one is fenced
        assert await store.release_lease(taken, "nonce=8") is True
        after = await store.acquire_lease(NAME, "worker-4", 30, BASE_TIME + 4)
        assert after == Lease(NAME, "worker-4", 4, BASE_TIME + 34, "nonce=8")

    async def test_take_over_changes_nothing_once_the_lease_moved(self, store: Store) -> None:
        takeover = _takeover(store)
        never_taken = Lease(NAME, "nobody", 1, BASE_TIME + 30)
        assert await takeover.take_over_lease(never_taken, "worker-1", 30, BASE_TIME) is None
        held = await _held_by_dead(store)
        for wrong in (Lease(NAME, "dead-1", 2, 0), Lease(NAME, "dead-2", 1, 0)):
            assert await takeover.take_over_lease(wrong, "worker-3", 30, BASE_TIME + 2) is None
        assert await store.release_lease(held, "nonce=8") is True  # it was alive after all
        assert await takeover.take_over_lease(held, "worker-3", 30, BASE_TIME + 3) is None
        again = await store.acquire_lease(NAME, "dead-2", 30, BASE_TIME + 4)
        assert again is not None
        expired = await store.acquire_lease(NAME, "worker-4", 30, BASE_TIME + 40)
        assert expired == Lease(NAME, "worker-4", 4, BASE_TIME + 70, "nonce=8")
        # The same holder name as read, but a later fence: the read is stale.
        assert await takeover.take_over_lease(again, "worker-3", 30, BASE_TIME + 41) is None
        assert await takeover.held_lease(NAME, BASE_TIME + 41) == expired

    async def test_concurrent_takeovers_have_one_winner(self, store: Store) -> None:
        takeover = _takeover(store)
        held = await _held_by_dead(store)
        results = await asyncio.gather(
            *(
                takeover.take_over_lease(held, f"worker-{i}", 30, BASE_TIME + 2)
                for i in range(RACERS)
            )
        )
        won = [lease for lease in results if lease is not None]
        assert len(won) == 1, results
        assert won[0].fence == held.fence + 1
        assert await takeover.held_lease(NAME, BASE_TIME + 3) == won[0]

    async def test_concurrent_takeovers_across_instances_have_one_winner(
        self, store: Store, second: Store
    ) -> None:
        takeovers = [_takeover(store), _takeover(second)]
        held = await _held_by_dead(store)
        results = await asyncio.gather(
            *(
                takeovers[i % 2].take_over_lease(held, f"worker-{i}", 30, BASE_TIME + 2)
                for i in range(RACERS)
            )
        )
        won = [lease for lease in results if lease is not None]
        assert len(won) == 1, results
        assert await takeovers[1].held_lease(NAME, BASE_TIME + 3) == won[0]
