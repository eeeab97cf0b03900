"""The store contract on listing: order, filters, and paging with a cursor.

The reconciler reads every SETTLING, PAID and PENDING record page by page,
passing ``after=(updated_at, challenge_id)`` of the last record it read, and
leaves many of them as they are; operators page the same way. A page must
start exactly after its cursor however many records share one ``updated_at``
(a busy instant, a coarse clock). A record that moves on before it was read
(every transition bumps ``updated_at``) is read once, where it moved to; one
already read that moves on is listed again there, since it changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from x402srv.access.records import ChallengeRecord, State
from x402srv.interfaces import Store
from x402srv.testing.builders import BASE_TIME, make_record
from x402srv.testing.store_contract_base import (
    StoreContractBase,
    applied,
    back_to_pending,
    created,
    expiring,
    settling,
)

__all__ = ["ListingContract", "page_through", "position"]

#: Runs between two pages with everything read so far.
Meanwhile = Callable[[list[ChallengeRecord]], Awaitable[None]]


def position(record: ChallengeRecord) -> tuple[float, str]:
    """Where a record sorts in a listing, and the cursor that lists what follows it."""
    return record.updated_at, record.challenge_id


async def page_through(
    store: Store, *, limit: int, meanwhile: Meanwhile | None = None, **filters: Any
) -> list[ChallengeRecord]:
    """Every page of one listing, each after the last record of the one before."""
    read: list[ChallengeRecord] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.list_challenges(after=after, limit=limit, **filters)
        assert len(page) <= limit
        read += page
        if len(page) < limit:
            return read
        after = position(page[-1])
        if meanwhile is not None:
            await meanwhile(read)


class ListingContract(StoreContractBase):
    """Part of ``StoreContract``: ``list_challenges``."""

    async def test_list_is_oldest_updated_first(self, store: Store) -> None:
        records = [make_record(at=BASE_TIME + offset) for offset in (30, 10, 40, 20, 0)]
        for record in records:
            await created(store, record)
        ordered = sorted(records, key=lambda r: r.updated_at)
        assert await store.list_challenges() == ordered
        assert await store.list_challenges(limit=2) == ordered[:2]

    async def test_list_filters_by_state_and_age(self, store: Store) -> None:
        pending = make_record(at=BASE_TIME)
        expired = make_record(at=BASE_TIME + 1, state=State.EXPIRED)
        settling_late = make_record(at=BASE_TIME + 5, state=State.SETTLING)
        for record in (settling_late, expired, pending):
            await created(store, record)
        assert await store.list_challenges(states=[State.SETTLING]) == [settling_late]
        both = await store.list_challenges(states=[State.PENDING, State.SETTLING])
        assert both == [pending, settling_late]
        assert await store.list_challenges(updated_before=BASE_TIME + 5) == [pending, expired]
        assert await store.list_challenges(
            states=[State.SETTLING, State.EXPIRED], updated_before=BASE_TIME + 5
        ) == [expired]
        assert await store.list_challenges(states=[]) == []

    async def test_list_follows_transitions(self, store: Store) -> None:
        first, second = make_record(at=BASE_TIME), make_record(at=BASE_TIME + 1)
        await created(store, first)
        await created(store, second)
        moved = applied(await store.transition(settling(first, at=BASE_TIME + 50)))
        assert await store.list_challenges() == [second, moved]
        assert await store.list_challenges(states=[State.PENDING]) == [second]

    # ------------------------------------------------------------ cursor

    async def test_cursor_lists_strictly_after_its_position(self, store: Store) -> None:
        early = [make_record(at=BASE_TIME) for _ in range(4)]
        late = [make_record(at=BASE_TIME + 1 / 3) for _ in range(3)]  # not exact in binary
        for record in (*late, *early):
            await created(store, record)
        ordered = sorted((*early, *late), key=position)
        for i, record in enumerate(ordered):
            assert await store.list_challenges(after=position(record)) == ordered[i + 1 :]
        assert await store.list_challenges(after=(BASE_TIME, "")) == ordered
        assert await store.list_challenges(after=(BASE_TIME - 1, "~")) == ordered
        assert await store.list_challenges(after=(BASE_TIME + 0.25, "")) == ordered[4:]
        assert await store.list_challenges(after=position(ordered[1]), limit=2) == ordered[2:4]
        assert await store.list_challenges(after=position(ordered[1]), limit=0) == []

    async def test_cursor_pages_read_every_record_once(self, store: Store) -> None:
        """Pages shorter than a run of equal times; records move on and arrive between pages."""
        offsets = (0, 0, 0, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 1 / 3, 2, 2, 5)
        records = [make_record(at=BASE_TIME + offset) for offset in offsets]
        for record in records:
            await created(store, record)
        ordered = sorted(records, key=position)

        async def meanwhile(read: list[ChallengeRecord]) -> None:
            if len(read) == 3:  # an unread record in the run of equal times moves past all
                applied(await store.transition(settling(ordered[5], at=BASE_TIME + 50)))
            elif len(read) == 6:
                await created(store, make_record(at=BASE_TIME + 60))
            elif len(read) == 9:
                applied(await store.transition(settling(ordered[12], at=BASE_TIME + 70)))

        read = await page_through(store, limit=3, meanwhile=meanwhile)
        assert read == await store.list_challenges(limit=100)
        assert len({record.challenge_id for record in read}) == len(records) + 1

    async def test_a_record_read_then_moved_on_is_listed_again(self, store: Store) -> None:
        first, second = make_record(at=BASE_TIME), make_record(at=BASE_TIME + 1)
        await created(store, first)
        await created(store, second)
        assert await store.list_challenges(limit=1) == [first]
        moved = applied(await store.transition(settling(first, at=BASE_TIME + 50)))
        assert await store.list_challenges(after=position(first)) == [second, moved]

    async def test_cursor_with_states_and_updated_before(self, store: Store) -> None:
        pending = [make_record(at=BASE_TIME + offset) for offset in (0, 0, 0, 1, 1, 1, 3)]
        busy = [make_record(at=BASE_TIME + offset, state=State.SETTLING) for offset in (0, 1, 2)]
        others = [make_record(state=State.EXPIRED), make_record(at=BASE_TIME + 9)]
        for record in (*pending, *busy, *others):
            await created(store, record)
        wanted: dict[str, Any] = {
            "states": [State.PENDING, State.SETTLING],
            "updated_before": BASE_TIME + 9,
        }
        ordered = sorted((*pending, *busy), key=position)
        assert await page_through(store, limit=2, **wanted) == ordered
        only_pending: dict[str, Any] = {"states": [State.PENDING], "updated_before": BASE_TIME + 9}
        assert await page_through(store, limit=2, **only_pending) == sorted(pending, key=position)
        assert await store.list_challenges(after=(BASE_TIME + 9, ""), **wanted) == []
        assert await store.list_challenges(after=position(ordered[0]), states=[]) == []

    async def test_cursor_pages_follow_records_leaving_the_filter(self, store: Store) -> None:
        records = [make_record(at=BASE_TIME + offset) for offset in (0, 0, 0, 0, 1, 1, 3)]
        for record in records:
            await created(store, record)
        wanted: dict[str, Any] = {"states": [State.PENDING], "updated_before": BASE_TIME + 9}
        first_page: list[ChallengeRecord] = []

        async def meanwhile(read: list[ChallengeRecord]) -> None:
            if first_page:
                return
            first_page.extend(read)
            # A record already read leaves the state; an unread one stays PENDING but
            # is now too young for ``updated_before``.
            applied(await store.transition(expiring(read[0], at=BASE_TIME + 4)))
            unread = max(records, key=position)
            applied(await store.transition(settling(unread, at=BASE_TIME + 19)))
            applied(await store.transition(back_to_pending(unread, at=BASE_TIME + 20)))

        read = await page_through(store, limit=2, meanwhile=meanwhile, **wanted)
        after_first = [
            record
            for record in await store.list_challenges(limit=100, **wanted)
            if position(record) > position(first_page[-1])
        ]
        assert read == first_page + after_first
        assert len(read) == len(records) - 1
