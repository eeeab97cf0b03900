"""The store contract on OWED records: payments that delivered nothing, owed back to the buyer.

A top-up paid for a grant that was revoked or expired before it could be
credited moves PAID -> OWED (``delivery``). The refunds find them by state, so
every store must take the state, list and find it, keep the record's claims
(the payment and its txHash stay spent), and keep it from pruning that
targets other states; ``store_contract_transfer`` carries one through an
export and import.
"""

from __future__ import annotations

import pytest

from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.interfaces import PaymentClaimed, Store, TxClaimed
from x402srv.testing.builders import BASE_TIME, make_key, make_record, new_tx_hash
from x402srv.testing.store_contract_base import (
    WORDED,
    StoreContractBase,
    applied,
    created,
    move,
    owing,
    paid,
    settling,
)

__all__ = ["OwedContract", "owed_record"]


async def owed_record(store: Store) -> tuple[ChallengeRecord, PaymentKey, str]:
    """A record paid in a transaction of its own, then OWED; with its payment key and txHash."""
    record, key, tx = make_record(), make_key(), new_tx_hash()
    await created(store, record)
    applied(await store.transition(settling(record, key)))
    done = applied(await store.transition(paid(record, tx)))
    return applied(await store.transition(owing(done))), key, tx


class OwedContract(StoreContractBase):
    """Part of ``StoreContract``: the OWED state."""

    async def test_a_paid_record_becomes_owed_and_keeps_its_claims(self, store: Store) -> None:
        owed, key, tx = await owed_record(store)
        assert owed.state is State.OWED
        assert [t.state for t in owed.history][-2:] == [State.PAID, State.OWED]
        assert owed.history[-1].reason == "owed to the buyer: grant revoked"
        assert await store.get_challenge(owed.challenge_id) == owed
        assert await store.get_by_tx_hash(tx) == owed
        assert owed.payment is not None
        # The payment and its transaction stay spent: nothing else can claim them.
        assert await store.get_by_payment(key) == owed
        other = make_record()
        taken = await store.create_challenge(make_record(), claim_payment=key)
        assert taken == PaymentClaimed(owed.challenge_id)
        await created(store, other)
        applied(await store.transition(settling(other)))
        assert await store.transition(paid(other, tx)) == TxClaimed(owed.challenge_id)

    async def test_owed_is_final(self, store: Store) -> None:
        owed, _, _ = await owed_record(store)
        for to in (State.DELIVERED, State.PAID, State.PENDING):
            with pytest.raises(ValueError, match=WORDED):
                await store.transition(move(owed, State.OWED, to, BASE_TIME + 50, "undo"))
        assert await store.get_challenge(owed.challenge_id) == owed

    async def test_owed_records_are_listed_and_found_by_state(self, store: Store) -> None:
        owed, _, _ = await owed_record(store)
        await created(store, make_record(at=BASE_TIME + 50))
        assert await store.list_challenges(states=[State.OWED]) == [owed]
        assert await store.find_challenges(states=[State.OWED]) == [owed]
        assert owed.payer is not None
        assert await store.find_challenges(payer=owed.payer, states=[State.OWED]) == [owed]
        assert owed not in await store.list_challenges(states=[State.DELIVERED, State.PAID])

    async def test_pruning_other_states_leaves_owed_records(self, store: Store) -> None:
        owed, _, _ = await owed_record(store)
        others = [State.PENDING, State.EXPIRED, State.CANCELLED, State.DELIVERED]
        assert await store.prune(states=others, updated_before=BASE_TIME + 10**9) == 0
        assert await store.get_challenge(owed.challenge_id) == owed
