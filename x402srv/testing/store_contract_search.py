"""The store contract on the console's search: ``find_challenges``, newest first.

The seller's console lists purchases, grants and challenges from the newest
back, a page at a time (``before=(updated_at, challenge_id)`` of the last
record shown), and finds a buyer's purchases by payer address. A payer is
filed under ``payer_of`` (``x402srv.plugin``): the payer of the payment being settled
from SETTLING on, the settled payer from PAID on, nobody once a payment is
released; the address is compared in lowercase.
"""

from __future__ import annotations

from x402srv.access.records import ChallengeRecord, State
from x402srv.interfaces import Store
from x402srv.testing.builders import BASE_TIME, make_key, make_record
from x402srv.testing.store_contract_base import (
    StoreContractBase,
    applied,
    back_to_pending,
    created,
    delivering,
    paid,
    settling,
)
from x402srv.testing.store_contract_listing import position

__all__ = ["SearchContract", "newest_pages"]


async def newest_pages(store: Store, *, limit: int, **filters: object) -> list[ChallengeRecord]:
    """Every page of one newest-first search, each before the last record of the one before."""
    read: list[ChallengeRecord] = []
    before: tuple[float, str] | None = None
    while True:
        page = await store.find_challenges(before=before, limit=limit, **filters)  # type: ignore[arg-type]
        assert len(page) <= limit
        read += page
        if len(page) < limit:
            return read
        before = position(page[-1])


def newest_first(records: list[ChallengeRecord]) -> list[ChallengeRecord]:
    return sorted(records, key=position, reverse=True)


class SearchContract(StoreContractBase):
    """Part of ``StoreContract``: ``find_challenges``."""

    async def test_find_is_newest_updated_first(self, store: Store) -> None:
        records = [make_record(at=BASE_TIME + offset) for offset in (30, 10, 40, 20, 0)]
        for record in records:
            await created(store, record)
        assert await store.find_challenges() == newest_first(records)
        assert await store.find_challenges(limit=2) == newest_first(records)[:2]
        assert await store.find_challenges(limit=0) == []

    async def test_find_filters_by_states(self, store: Store) -> None:
        pending = make_record(at=BASE_TIME)
        expired = make_record(at=BASE_TIME + 1, state=State.EXPIRED)
        settling_late = make_record(at=BASE_TIME + 5, state=State.SETTLING)
        delivered = make_record(at=BASE_TIME + 3, state=State.DELIVERED)
        for record in (settling_late, expired, pending, delivered):
            await created(store, record)
        assert await store.find_challenges(states=[State.SETTLING]) == [settling_late]
        purchases = [State.SETTLING, State.PAID, State.DELIVERED]
        assert await store.find_challenges(states=purchases) == [settling_late, delivered]
        assert await store.find_challenges(states=purchases, limit=1) == [settling_late]
        assert await store.find_challenges(states=[]) == []

    async def test_find_pages_back_with_a_cursor(self, store: Store) -> None:
        """Runs of equal times longer than a page, over several states at once."""
        offsets = (0, 0, 0, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 2, 2, 5)
        records = [
            make_record(at=BASE_TIME + offset, state=(State.PENDING, State.DELIVERED)[i % 2])
            for i, offset in enumerate(offsets)
        ]
        for record in records:
            await created(store, record)
        ordered = newest_first(records)
        assert await newest_pages(store, limit=3) == ordered
        both = [State.PENDING, State.DELIVERED]
        assert await newest_pages(store, limit=2, states=both) == ordered
        delivered = [r for r in ordered if r.state is State.DELIVERED]
        assert await newest_pages(store, limit=2, states=[State.DELIVERED]) == delivered
        for i, record in enumerate(ordered):
            assert await store.find_challenges(before=position(record)) == ordered[i + 1 :]
        assert await store.find_challenges(before=(BASE_TIME + 5, "~")) == ordered
        assert await store.find_challenges(before=(BASE_TIME, "")) == []

    async def test_a_payer_is_filed_from_settling_on(self, store: Store) -> None:
        key = make_key(payer="0x" + "Ab" * 20)
        record = make_record(at=BASE_TIME)
        await created(store, record)
        assert await store.find_challenges(payer=key.payer) == []
        moving = applied(await store.transition(settling(record, key, at=BASE_TIME + 1)))
        assert await store.find_challenges(payer=key.payer) == [moving]
        assert await store.find_challenges(payer=key.payer.lower()) == [moving]
        assert await store.find_challenges(payer=key.payer.upper().replace("0X", "0x")) == [moving]
        released = applied(await store.transition(back_to_pending(moving, at=BASE_TIME + 2)))
        assert released.payment is None
        assert await store.find_challenges(payer=key.payer) == []

    async def test_a_payer_keeps_its_purchases_through_delivery(self, store: Store) -> None:
        buyer, other = make_key(), make_key()
        mine: list[ChallengeRecord] = []
        for i in range(3):
            record = make_record(at=BASE_TIME + i)
            await created(store, record)
            moving = applied(await store.transition(settling(record, make_key(payer=buyer.payer))))
            done = applied(await store.transition(paid(moving, "0x" + f"{i:064x}")))
            # ``paid`` records its own payer; the payer filed is the settled one from here.
            mine.append(done)
        theirs = make_record(at=BASE_TIME + 9)
        await created(store, theirs)
        applied(await store.transition(settling(theirs, other)))
        settled_payer = mine[0].payer
        assert settled_payer is not None
        assert await store.find_challenges(payer=buyer.payer) == []
        assert await store.find_challenges(payer=settled_payer) == newest_first(mine)
        delivered = applied(await store.transition(delivering(mine[1], at=BASE_TIME + 50)))
        found = await store.find_challenges(payer=settled_payer)
        assert found[0] == delivered
        assert await store.find_challenges(payer=settled_payer, states=[State.DELIVERED]) == [
            delivered
        ]
        assert await newest_pages(store, limit=1, payer=settled_payer) == found
        assert await store.find_challenges(payer=other.payer) != []
        assert await store.find_challenges(payer="0x" + "00" * 20) == []

    async def test_a_payer_discovery_first_purchase_is_filed(self, store: Store) -> None:
        """A challenge created already SETTLING with its claim carries its payer at once."""
        key = make_key()
        pending = make_record(at=BASE_TIME)
        moving = pending.apply(settling(pending, key).changes, State.SETTLING, BASE_TIME, "claim")
        assert await store.create_challenge(moving, claim_payment=key) == (moving, True)
        assert await store.find_challenges(payer=key.payer) == [moving]

    async def test_pruned_records_leave_the_search(self, store: Store) -> None:
        key = make_key()
        record = make_record(at=BASE_TIME)
        await created(store, record)
        moving = applied(await store.transition(settling(record, key)))
        done = applied(await store.transition(paid(moving, "0x" + "cd" * 32)))
        delivered = applied(await store.transition(delivering(done)))
        assert delivered.payer is not None
        assert await store.find_challenges(payer=delivered.payer) == [delivered]
        pruned = await store.prune(states=[State.DELIVERED], updated_before=BASE_TIME + 10**6)
        assert pruned == 1
        assert await store.find_challenges(payer=delivered.payer) == []
        assert await store.find_challenges() == []

    async def test_ids_no_store_can_hold_find_nothing(self, store: Store) -> None:
        assert await store.find_challenges(payer="\ud800") == []
        assert await store.find_challenges(before=(BASE_TIME, "\ud800")) == []
