"""The store contract on credits: the methods of ``CreditStore`` (``credit``, ``spend`` ...).

Plans that sell calls keep a balance per grant in the store, spent by every
worker and instance at once. A credit must count exactly once per key however
many deliveries race (a crash between settlement and crediting is finished by
a retry or the reconciler, which credits again with the same key), a spend must
never take the last credit twice, and a full rate window must refuse before
anything is spent. These run for every store that has the methods; a store
without them skips them (and the registry refuses it for plans that sell calls).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from x402srv.interfaces import (
    CreditStore,
    RateWindow,
    SpendOutcome,
    Store,
    UsageStore,
    UsedCall,
    keeps_credits,
    keeps_used_calls,
)
from x402srv.stores.credit_rules import USED_CALLS
from x402srv.testing.builders import BASE_TIME, new_id
from x402srv.testing.store_contract_base import RACERS, StoreContractBase

__all__ = ["CreditContract"]

#: Accounts live this long in the tests unless a test is about their end.
KEEP = BASE_TIME + 86_400
NOW = BASE_TIME + 5  # inside one rate window of 60 s and one usage hour
SPENT, NO_CREDITS, THROTTLED = SpendOutcome.SPENT, SpendOutcome.NO_CREDITS, SpendOutcome.THROTTLED


def _credits(store: Store) -> CreditStore:
    if not keeps_credits(store):
        pytest.skip(f"the store {store.name!r} keeps no credits (not a CreditStore)")
    assert isinstance(store, CreditStore)
    return store


def _usage(store: Store) -> UsageStore:
    if not keeps_used_calls(store):
        pytest.skip(f"the store {store.name!r} keeps no used calls (not a UsageStore)")
    assert isinstance(store, UsageStore)
    return store


async def _funded(store: CreditStore, amount: int, *, now: float = NOW) -> str:
    grant = new_id()
    credited = await store.credit(grant, amount, key=grant, now=now, keep_until=KEEP)
    assert (credited.balance, credited.applied) == (amount, True)
    return grant


class CreditContract(StoreContractBase):
    """Part of ``StoreContract``: the credit methods, when the store has them."""

    # ------------------------------------------------------------ credit

    async def test_credit_opens_an_account(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 1000)
        account = await credits.get_credits(grant)
        assert account is not None
        assert (account.grant_id, account.balance, account.credited) == (grant, 1000, 1000)
        assert (account.spent, account.refunded, account.calls) == (0, 0, 0)
        assert account.keep_until == KEEP
        assert [(e.key, e.amount, e.at) for e in account.entries] == [(grant, 1000, NOW)]
        assert account.usage == ()

    async def test_a_key_is_credited_once(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 100)
        again = await credits.credit(grant, 100, key=grant, now=NOW + 1, keep_until=KEEP)
        assert (again.balance, again.applied) == (100, False)
        top_up = await credits.credit(grant, 100, key="top-up-1", now=NOW + 2, keep_until=KEEP)
        assert (top_up.balance, top_up.applied) == (200, True)
        replayed = await credits.credit(grant, 100, key="top-up-1", now=NOW + 3, keep_until=KEEP)
        assert (replayed.balance, replayed.applied) == (200, False)
        account = await credits.get_credits(grant)
        assert account is not None
        assert [(e.key, e.amount) for e in account.entries] == [(grant, 100), ("top-up-1", 100)]
        assert account.credited == 200

    async def test_keys_and_grants_are_kept_apart(self, store: Store) -> None:
        credits = _credits(store)
        first, second = new_id(), new_id()
        await credits.credit(first, 5, key="k", now=NOW, keep_until=KEEP)
        other = await credits.credit(second, 7, key="k", now=NOW, keep_until=KEEP)
        assert (other.balance, other.applied) == (7, True)
        spent = await credits.spend(first, 5, now=NOW, keep_until=KEEP)
        assert (spent.outcome, spent.balance) == (SPENT, 0)
        assert (await credits.spend(second, 1, now=NOW, keep_until=KEEP)).balance == 6

    async def test_keep_until_only_moves_later(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 10)
        await credits.credit(grant, 1, key="later", now=NOW, keep_until=KEEP + 100)
        await credits.credit(grant, 1, key="sooner", now=NOW, keep_until=KEEP - 100)
        await credits.spend(grant, 1, now=NOW, keep_until=KEEP - 50)
        account = await credits.get_credits(grant)
        assert account is not None
        assert account.keep_until == KEEP + 100

    # ------------------------------------------------------------ spend

    async def test_spend_takes_the_cost_and_counts_the_call(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 10)
        first = await credits.spend(grant, 1, now=NOW, keep_until=KEEP)
        assert (first.outcome, first.balance, first.window_calls, first.window_end) == (
            SPENT,
            9,
            0,
            0,
        )
        heavy = await credits.spend(grant, 4, now=NOW + 1, keep_until=KEEP)
        assert (heavy.outcome, heavy.balance) == (SPENT, 5)
        account = await credits.get_credits(grant)
        assert account is not None
        assert (account.balance, account.spent, account.calls) == (5, 5, 2)

    async def test_spend_never_overdraws(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 3)
        assert (await credits.spend(grant, 2, now=NOW, keep_until=KEEP)).balance == 1
        refused = await credits.spend(grant, 2, now=NOW, keep_until=KEEP)
        assert (refused.outcome, refused.balance) == (NO_CREDITS, 1)
        last = await credits.spend(grant, 1, now=NOW, keep_until=KEEP)
        assert (last.outcome, last.balance) == (SPENT, 0)
        empty = await credits.spend(grant, 1, now=NOW, keep_until=KEEP)
        assert (empty.outcome, empty.balance) == (NO_CREDITS, 0)
        account = await credits.get_credits(grant)
        assert account is not None
        assert (account.balance, account.spent, account.calls) == (0, 3, 2)

    async def test_no_account_has_no_credits_and_gains_none(self, store: Store) -> None:
        credits = _credits(store)
        grant = new_id()
        refused = await credits.spend(grant, 1, now=NOW, keep_until=KEEP)
        assert (refused.outcome, refused.balance) == (NO_CREDITS, 0)
        assert await credits.get_credits(grant) is None

    async def test_a_rate_window_refuses_before_anything_is_spent(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 100)
        rate = RateWindow(limit=3, seconds=60)
        end = (int(NOW) // 60 + 1) * 60
        answers = [
            await credits.spend(grant, 1, now=NOW + i, keep_until=KEEP, rate=rate) for i in range(4)
        ]
        assert [(a.outcome, a.window_calls, a.window_end) for a in answers] == [
            (SPENT, 1, end),
            (SPENT, 2, end),
            (SPENT, 3, end),
            (THROTTLED, 3, end),
        ]
        assert answers[-1].balance == 97
        after = await credits.spend(grant, 1, now=end, keep_until=KEEP, rate=rate)
        assert (after.outcome, after.window_calls, after.window_end) == (SPENT, 1, end + 60)
        assert after.balance == 96
        account = await credits.get_credits(grant)
        assert account is not None
        assert account.calls == 4

    async def test_a_full_window_answers_before_an_empty_balance(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 1)
        rate = RateWindow(limit=1, seconds=1)
        assert (await credits.spend(grant, 1, now=NOW, keep_until=KEEP, rate=rate)).outcome == SPENT
        both = await credits.spend(grant, 1, now=NOW + 0.5, keep_until=KEEP, rate=rate)
        assert (both.outcome, both.balance) == (THROTTLED, 0)
        later = await credits.spend(grant, 1, now=NOW + 1, keep_until=KEEP, rate=rate)
        assert (later.outcome, later.balance, later.window_calls) == (NO_CREDITS, 0, 0)

    async def test_rate_only_spends_open_an_account_and_count_calls(self, store: Store) -> None:
        """Plans sold by time with a rate limit meter calls, not credits."""
        credits = _credits(store)
        grant = new_id()
        rate = RateWindow(limit=2, seconds=10)
        spends = [
            await credits.spend(grant, 1, now=NOW, keep_until=KEEP, rate=rate, credits=False)
            for _ in range(3)
        ]
        assert [(s.outcome, s.balance, s.window_calls) for s in spends] == [
            (SPENT, None, 1),
            (SPENT, None, 2),
            (THROTTLED, None, 2),
        ]
        account = await credits.get_credits(grant)
        assert account is not None
        assert (account.balance, account.spent, account.calls) == (0, 0, 2)

    # ------------------------------------------------------------ refund, usage, end of life

    async def test_a_refund_gives_credits_back(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 5)
        await credits.spend(grant, 3, now=NOW, keep_until=KEEP)
        assert await credits.refund(grant, 3, now=NOW + 1) == 5
        account = await credits.get_credits(grant)
        assert account is not None
        assert (account.balance, account.spent, account.refunded, account.calls) == (5, 3, 3, 1)
        assert await credits.refund(new_id(), 1, now=NOW) is None

    async def test_usage_is_kept_per_hour_and_bounded(self, store: Store) -> None:
        from x402srv.plugin import USAGE_BUCKETS, bucket_start

        credits = _credits(store)
        grant = await _funded(credits, 10_000)
        first = bucket_start(NOW)
        for hour in range(USAGE_BUCKETS + 5):
            at = first + hour * 3600 + 1
            await credits.spend(grant, 2, now=at, keep_until=KEEP + 10**6)
            await credits.spend(grant, 1, now=at + 1, keep_until=KEEP + 10**6)
        await credits.refund(grant, 1, now=at + 2)
        account = await credits.get_credits(grant)
        assert account is not None
        assert len(account.usage) == USAGE_BUCKETS
        newest, oldest = account.usage[0], account.usage[-1]
        assert (newest.start, newest.calls, newest.spent, newest.refunded) == (
            first + (USAGE_BUCKETS + 4) * 3600,
            2,
            3,
            1,
        )
        assert oldest.start == first + 5 * 3600
        assert [b.start for b in account.usage] == sorted(
            (b.start for b in account.usage), reverse=True
        )
        assert account.calls == 2 * (USAGE_BUCKETS + 5)

    async def test_an_account_past_keep_until_is_gone(self, store: Store) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 5)
        late = KEEP + 1
        gone = await credits.spend(grant, 1, now=late, keep_until=late + 10)
        assert (gone.outcome, gone.balance) == (NO_CREDITS, 0)
        assert await credits.refund(grant, 1, now=late) is None
        again = await credits.credit(grant, 2, key=grant, now=late, keep_until=late + 100)
        assert (again.balance, again.applied) == (2, True)
        account = await credits.get_credits(grant)
        assert account is not None
        assert [(e.key, e.amount) for e in account.entries] == [(grant, 2)]
        assert (account.credited, account.spent) == (2, 0)

    @pytest.mark.parametrize(
        "name", ["\ud800", "a\x00b", "x" * 300], ids=["surrogate", "nul", "300"]
    )
    async def test_a_grant_no_backend_can_hold_has_no_account(
        self, store: Store, name: str
    ) -> None:
        assert await _credits(store).get_credits(name) is None

    async def test_accounts_outlive_a_reopen(self, store: Store, reopen: object) -> None:
        credits = _credits(store)
        grant = await _funded(credits, 10)
        await credits.spend(grant, 4, now=NOW, keep_until=KEEP)
        assert callable(reopen)
        fresh = _credits(await reopen())
        account = await fresh.get_credits(grant)
        assert account is not None
        assert (account.balance, account.calls) == (6, 1)
        assert (await fresh.credit(grant, 10, key=grant, now=NOW, keep_until=KEEP)).applied is False

    # ------------------------------------------------------------ races

    async def test_racing_spends_never_take_the_last_credit_twice(
        self, sharing: tuple[Store, Store]
    ) -> None:
        """200 calls at once against 50 credits (over two instances when the store is shared)."""
        stores = [_credits(s) for s in sharing]
        grant = await _funded(stores[0], 50)
        calls = [
            stores[i % 2].spend(grant, 1, now=NOW + i / 1000, keep_until=KEEP) for i in range(200)
        ]
        outcomes = Counter(answer.outcome for answer in await asyncio.gather(*calls))
        account = await stores[1].get_credits(grant)
        assert account is not None
        print(
            f"\n[{type(stores[0]).__name__}] 200 concurrent spends against 50 credits: "
            f"{outcomes[SPENT]} spent, {outcomes[NO_CREDITS]} refused (no credits), "
            f"balance {account.balance}, calls {account.calls}"
        )
        assert outcomes == {SPENT: 50, NO_CREDITS: 150}
        assert (account.balance, account.spent, account.calls) == (0, 50, 50)

    async def test_racing_spends_fill_a_window_exactly(self, sharing: tuple[Store, Store]) -> None:
        stores = [_credits(s) for s in sharing]
        grant = await _funded(stores[0], 1000)
        rate = RateWindow(limit=25, seconds=60)
        calls = [
            stores[i % 2].spend(grant, 1, now=NOW, keep_until=KEEP, rate=rate) for i in range(100)
        ]
        outcomes = Counter(answer.outcome for answer in await asyncio.gather(*calls))
        assert outcomes == {SPENT: 25, THROTTLED: 75}
        account = await stores[0].get_credits(grant)
        assert account is not None
        assert (account.balance, account.window_calls) == (975, 25)

    async def test_racing_deliveries_credit_a_key_once(self, sharing: tuple[Store, Store]) -> None:
        stores = [_credits(s) for s in sharing]
        grant = await _funded(stores[0], 10)
        calls = [
            stores[i % 2].credit(grant, 100, key="top-up", now=NOW, keep_until=KEEP)
            for i in range(RACERS)
        ]
        answers = await asyncio.gather(*calls)
        assert sum(answer.applied for answer in answers) == 1
        assert sorted(answer.balance for answer in answers)[-1] == 110
        account = await stores[1].get_credits(grant)
        assert account is not None
        assert (account.balance, len(account.entries)) == (110, 2)

    async def test_racing_top_ups_and_spends_lose_nothing(
        self, sharing: tuple[Store, Store]
    ) -> None:
        stores = [_credits(s) for s in sharing]
        grant = await _funded(stores[0], 100)
        top_ups = [
            stores[i % 2].credit(grant, 10, key=f"top-up-{i}", now=NOW, keep_until=KEEP)
            for i in range(RACERS)
        ]
        spends = [stores[i % 2].spend(grant, 3, now=NOW, keep_until=KEEP) for i in range(RACERS)]
        await asyncio.gather(*top_ups, *spends)
        account = await stores[0].get_credits(grant)
        assert account is not None
        assert account.balance == 100 + 10 * RACERS - 3 * RACERS
        assert (account.credited, account.spent, account.calls) == (
            100 + 10 * RACERS,
            3 * RACERS,
            RACERS,
        )

    # ------------------------------------------------------------ reserve, then settle

    async def test_a_reservation_settles_to_what_the_call_used(self, store: Store) -> None:
        """A call charged by use (docs/selling-calls.md, "Charging by use").

        The reservation is one atomic ``spend`` of the reserve, the settlement one
        atomic ``refund`` of what the call did not use: between the two the
        reserve counts against the balance, so no other call can spend it.
        """
        credits = _credits(store)
        grant = await _funded(credits, 10)
        reserved = await credits.spend(grant, 6, now=NOW, keep_until=KEEP)
        assert (reserved.outcome, reserved.balance) == (SPENT, 4)
        refused = await credits.spend(grant, 6, now=NOW, keep_until=KEEP)
        assert (refused.outcome, refused.balance) == (NO_CREDITS, 4)  # held, not spendable
        assert await credits.refund(grant, 6 - 2, now=NOW + 1) == 8  # used 2 of 6
        account = await credits.get_credits(grant)
        assert account is not None
        assert account.balance == account.credited - account.spent + account.refunded == 8
        assert account.calls == 1

    async def test_racing_reservations_never_spend_more_than_the_balance(
        self, sharing: tuple[Store, Store]
    ) -> None:
        """200 calls reserving 5 at once against 50 credits; each uses 1 to 5 and settles."""
        stores = [_credits(s) for s in sharing]
        grant = await _funded(stores[0], 50)

        async def call(i: int) -> int:
            store = stores[i % 2]
            reserved = await store.spend(grant, 5, now=NOW, keep_until=KEEP)
            if reserved.outcome is not SPENT:
                return 0
            used = 1 + i % 5
            if used < 5:
                assert await store.refund(grant, 5 - used, now=NOW) is not None
            return used

        charged = await asyncio.gather(*(call(i) for i in range(200)))
        account = await stores[1].get_credits(grant)
        assert account is not None
        print(
            f"\n[{type(stores[0]).__name__}] 200 concurrent reservations of 5 against 50 "
            f"credits: {sum(1 for c in charged if c)} ran, {sum(charged)} charged, "
            f"balance {account.balance}"
        )
        assert sum(charged) <= 50
        assert account.balance == 50 - sum(charged) >= 0
        assert account.calls == sum(1 for c in charged if c) >= 10

    async def test_settle_releases_the_unused_part_and_records_the_call(self, store: Store) -> None:
        usage = _usage(store)
        grant = await _funded(usage, 10)
        await usage.spend(grant, 6, now=NOW, keep_until=KEEP)
        first = UsedCall(NOW + 1, "/v1/complete", 6, 2)
        assert await usage.settle(grant, 4, now=NOW + 1, call=first) == 8
        await usage.spend(grant, 3, now=NOW + 2, keep_until=KEEP)
        whole = UsedCall(NOW + 3, "/mcp:search", 3, 3)  # used all it held: nothing released
        assert await usage.settle(grant, 0, now=NOW + 3, call=whole) == 5
        account = await usage.get_credits(grant)
        assert account is not None
        assert account.used_calls == (whole, first)  # newest first
        assert (account.balance, account.spent, account.refunded, account.calls) == (5, 9, 4, 2)
        assert [(b.calls, b.spent, b.refunded) for b in account.usage] == [(2, 9, 4)]

    async def test_settle_without_an_account_changes_nothing(self, store: Store) -> None:
        usage = _usage(store)
        grant = new_id()
        call = UsedCall(NOW, "/v1/complete", 5, 1)
        assert await usage.settle(grant, 4, now=NOW, call=call) is None
        assert await usage.get_credits(grant) is None

    @pytest.mark.parametrize(
        ("release", "call"),
        [
            (-1, UsedCall(NOW, "/r", 5, 1)),
            (0, UsedCall(NOW, "/r", 5, 6)),
            (0, UsedCall(NOW, "/r", 0, 0)),
            (0, UsedCall(NOW, "", 5, 1)),
            (0, UsedCall(NOW, "/" + "r" * 300, 5, 1)),
        ],
        ids=["negative-release", "over-reserved", "no-reservation", "no-route", "long-route"],
    )
    async def test_a_settle_that_makes_no_sense_is_refused(
        self, store: Store, release: int, call: UsedCall
    ) -> None:
        usage = _usage(store)
        grant = await _funded(usage, 10)
        with pytest.raises(ValueError, match=r"route|reserved|charged|release"):
            await usage.settle(grant, release, now=NOW, call=call)
        account = await usage.get_credits(grant)
        assert account is not None
        assert (account.balance, account.used_calls) == (10, ())

    async def test_used_calls_are_bounded_newest_first(self, store: Store) -> None:
        usage = _usage(store)
        grant = await _funded(usage, 10_000)
        for i in range(USED_CALLS + 3):
            await usage.spend(grant, 2, now=NOW + i, keep_until=KEEP)
            await usage.settle(grant, 1, now=NOW + i, call=UsedCall(NOW + i, f"/r{i}", 2, 1))
        account = await usage.get_credits(grant)
        assert account is not None
        assert len(account.used_calls) == USED_CALLS
        assert [c.route for c in account.used_calls[:2]] == [
            f"/r{USED_CALLS + 2}",
            f"/r{USED_CALLS + 1}",
        ]
        assert account.balance == 10_000 - (USED_CALLS + 3)

    async def test_racing_settlements_lose_no_credit_and_no_call(
        self, sharing: tuple[Store, Store]
    ) -> None:
        """60 calls reserving 5 against 100 credits at once, settled with their record."""
        stores = [_usage(s) for s in sharing]
        grant = await _funded(stores[0], 100)

        async def call(i: int) -> int:
            store = stores[i % 2]
            reserved = await store.spend(grant, 5, now=NOW, keep_until=KEEP)
            if reserved.outcome is not SPENT:
                return 0
            used = i % 6  # 0 to 5
            record = UsedCall(NOW, f"/r{i}", 5, used)
            assert await store.settle(grant, 5 - used, now=NOW, call=record) is not None
            return used

        charged = await asyncio.gather(*(call(i) for i in range(60)))
        account = await stores[1].get_credits(grant)
        assert account is not None
        assert account.balance == 100 - sum(charged) >= 0
        assert len(account.used_calls) == account.calls
        assert sorted(c.charged for c in account.used_calls) == sorted(
            c for i, c in enumerate(charged) if f"/r{i}" in {u.route for u in account.used_calls}
        )
