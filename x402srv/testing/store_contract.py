"""The one contract test-suite every ``Store`` runs (docs/protocol/states.md, ``interfaces.Store``).

The pipeline's guarantees (one settlement per challenge, one challenge per
payment and per txHash, nothing lost) rest on these checks holding for
whichever store the seller picks, so built-in and third-party stores run the
same tests. Subclass it in a test module and provide a ``store`` fixture that
yields an opened, empty store and closes it afterwards::

    import pytest
    from x402srv.testing import StoreContract

    class TestMyStore(StoreContract):
        durable = True  # records survive close/open; other instances share them

        @pytest.fixture
        async def store(self, tmp_path):
            store = MyStore(tmp_path / "db")
            await store.start()
            yield store
            await store.close()

        def another_store(self, store):  # durable stores only
            return MyStore(store.path)  # unopened, same backend

        def fresh_store(self, store):  # export/import (PortableStore) only
            return MyStore(store.path.with_name("other.db"))  # unopened, empty, its own

Stores never read a clock: every test passes ``at``/``now`` explicitly.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from x402srv.access.records import ChallengeRecord, PaymentKey, RecordChanges, State, Transition
from x402srv.interfaces import (
    Lease,
    PaymentClaimed,
    StateMismatch,
    Store,
    TransitionApplied,
    TxClaimed,
)
from x402srv.testing.builders import (
    BASE_TIME,
    make_grant,
    make_key,
    make_payment,
    make_record,
    new_tx_hash,
)
from x402srv.testing.store_contract_base import (
    RACERS,
    WORDED,
    Reopen,
    StoreContractBase,
    applied,
    back_to_pending,
    claiming_delivery,
    created,
    delivering,
    expiring,
    full_record,
    given_back,
    paid,
    settling,
    settling_again,
    tx_is_free,
)
from x402srv.testing.store_contract_counters import CounterContract
from x402srv.testing.store_contract_counts import CountsContract
from x402srv.testing.store_contract_credits import CreditContract
from x402srv.testing.store_contract_leases import LeaseTakeoverContract
from x402srv.testing.store_contract_listing import ListingContract
from x402srv.testing.store_contract_owed import OwedContract
from x402srv.testing.store_contract_refunds import RefundContract
from x402srv.testing.store_contract_search import SearchContract
from x402srv.testing.store_contract_siwx import SiwxNonceContract
from x402srv.testing.store_contract_transfer import TransferContract

# ``settling`` and ``paid`` stay importable from here for the stores' own tests.
__all__ = ["Reopen", "StoreContract", "paid", "settling"]


class StoreContract(
    ListingContract,
    OwedContract,
    RefundContract,
    SearchContract,
    CounterContract,
    CountsContract,
    CreditContract,
    TransferContract,
    SiwxNonceContract,
    LeaseTakeoverContract,
    StoreContractBase,
):
    """Inherit in a ``Test...`` class that provides the ``store`` fixture."""

    # ------------------------------------------------------------ open, ping

    async def test_ping_and_open_again(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        await store.ping()
        await store.start()
        assert await store.get_challenge(record.challenge_id) == record

    # ------------------------------------------------------------ create and read

    async def test_create_then_read_by_id_and_request_id(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        assert await store.get_challenge(record.challenge_id) == record
        assert await store.get_by_request_id(record.request_id) == record

    async def test_missing_reads_return_none(self, store: Store) -> None:
        assert await store.get_challenge("no-such-challenge") is None
        assert await store.get_by_request_id("no-such-request") is None
        assert await store.get_by_payment(make_key()) is None
        assert await store.get_by_tx_hash(new_tx_hash()) is None
        assert await store.get_task("no-such-task") is None

    @pytest.mark.parametrize(
        "name", ["\ud800", "a\x00b", "x" * 300], ids=["lone-surrogate", "nul", "300-chars"]
    )
    async def test_a_name_no_backend_can_hold_finds_nothing(self, store: Store, name: str) -> None:
        """Lookups take ids from clients: one that cannot be encoded is absent, not a crash."""
        await created(store, make_record())
        assert await store.get_challenge(name) is None
        assert await store.get_by_request_id(name) is None
        assert await store.get_by_tx_hash(name) is None
        assert await store.get_by_payment(make_key(nonce=name)) is None
        assert await store.get_task(name) is None

    async def test_every_field_round_trips(self, store: Store) -> None:
        record, key = full_record()
        for field in dataclasses.fields(ChallengeRecord):
            assert getattr(record, field.name) not in (None, (), False), field.name
        assert record.payment is not None
        for field in dataclasses.fields(record.payment):
            assert getattr(record.payment, field.name) is not None, field.name
        await created(store, record, key)
        assert await store.get_challenge(record.challenge_id) == record
        assert await store.get_by_request_id(record.request_id) == record
        assert await store.get_by_payment(key) == record
        assert await store.list_challenges() == [record]

    async def test_same_request_id_returns_the_existing_record(self, store: Store) -> None:
        first = make_record()
        await created(store, first)
        again = make_record(request_id=first.request_id, plan_id="other")
        assert await store.create_challenge(again) == (first, False)
        assert await store.get_challenge(again.challenge_id) is None
        assert await store.get_by_request_id(first.request_id) == first

    async def test_existing_request_id_wins_over_a_claimed_payment(self, store: Store) -> None:
        key = make_key()
        owner, first = make_record(), make_record()
        await created(store, owner, key)
        await created(store, first)
        again = make_record(request_id=first.request_id)
        assert await store.create_challenge(again, claim_payment=key) == (first, False)
        assert await store.get_by_payment(key) == owner

    async def test_duplicate_challenge_id_is_refused(self, store: Store) -> None:
        first = make_record()
        await created(store, first)
        clash = make_record(challenge_id=first.challenge_id)
        with pytest.raises(ValueError, match=WORDED):
            await store.create_challenge(clash)
        with pytest.raises(ValueError, match=WORDED):
            await store.create_challenge(clash, claim_payment=make_key())
        assert await store.get_by_request_id(clash.request_id) is None
        assert await store.get_challenge(first.challenge_id) == first

    async def test_create_with_claim_takes_record_and_claim_together(self, store: Store) -> None:
        key = make_key()
        record = make_record(state=State.SETTLING, implicit=True, payment=make_payment(key))
        await created(store, record, key)
        assert await store.get_by_payment(key) == record

    async def test_create_with_a_claimed_payment_inserts_nothing(self, store: Store) -> None:
        key = make_key()
        owner, loser = make_record(), make_record()
        await created(store, owner, key)
        assert await store.create_challenge(loser, claim_payment=key) == PaymentClaimed(
            owner.challenge_id
        )
        assert await store.get_challenge(loser.challenge_id) is None
        assert await store.get_by_request_id(loser.request_id) is None
        assert await store.get_by_payment(key) == owner

    async def test_payment_keys_ignore_case(self, store: Store) -> None:
        key = make_key(payer="0x" + "AbCdEf" * 6 + "0A0B", nonce="0x" + "FE" * 32)
        record = make_record()
        await created(store, record, key)
        lower = PaymentKey(key.chain_id, key.asset.lower(), key.payer.lower(), key.nonce.lower())
        upper = PaymentKey(key.chain_id, key.asset.upper(), key.payer.upper(), key.nonce.upper())
        assert await store.get_by_payment(lower) == record
        assert await store.create_challenge(make_record(), claim_payment=upper) == PaymentClaimed(
            record.challenge_id
        )

    async def test_concurrent_creates_with_one_request_id_create_one(self, store: Store) -> None:
        request_id = make_record().request_id
        records = [make_record(request_id=request_id) for _ in range(RACERS)]
        results = await asyncio.gather(*(store.create_challenge(r) for r in records))
        winners = [r for r in results if isinstance(r, tuple) and r[1]]
        assert len(winners) == 1
        winner = winners[0][0]
        assert all(r == (winner, False) for r in results if r is not winners[0])
        assert await store.get_by_request_id(request_id) == winner
        assert await store.list_challenges() == [winner]

    async def test_concurrent_creates_racing_for_one_payment(self, store: Store) -> None:
        key = make_key()
        records = [make_record() for _ in range(RACERS)]
        results = await asyncio.gather(
            *(store.create_challenge(r, claim_payment=key) for r in records)
        )
        winners = [r for r in results if isinstance(r, tuple)]
        assert len(winners) == 1
        assert winners[0][1]
        winner = winners[0][0]
        assert results.count(PaymentClaimed(winner.challenge_id)) == RACERS - 1
        assert await store.get_by_payment(key) == winner
        assert await store.list_challenges() == [winner]

    # ------------------------------------------------------------ transitions

    async def test_transition_applies_changes_and_appends_history(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        key, tx = make_key(), new_tx_hash()
        settling_req = settling(record, key)
        one = applied(await store.transition(settling_req))
        assert one.state is State.SETTLING
        assert one.payment == settling_req.changes.payment
        assert one.updated_at == BASE_TIME + 10
        two = applied(await store.transition(paid(record, tx)))
        assert (two.tx_hash, two.payer, two.payment) == (tx, "0x" + "ab" * 20, one.payment)
        grant = make_grant(two)
        three = applied(await store.transition(delivering(record, grant)))
        assert three.grant == grant
        assert three.history == (
            Transition(State.SETTLING, BASE_TIME + 10, "settling"),
            Transition(State.PAID, BASE_TIME + 20, "settled"),
            Transition(State.DELIVERED, BASE_TIME + 40, "delivered"),
        )
        expected = record.apply(settling_req.changes, State.SETTLING, BASE_TIME + 10, "settling")
        expected = expected.apply(paid(record, tx).changes, State.PAID, BASE_TIME + 20, "settled")
        expected = expected.apply(
            RecordChanges(grant=grant), State.DELIVERED, BASE_TIME + 40, "delivered"
        )
        assert three == expected
        assert await store.get_challenge(record.challenge_id) == three
        assert await store.get_by_payment(key) == three

    async def test_transition_of_a_missing_record(self, store: Store) -> None:
        missing = make_record()
        assert await store.transition(settling(missing)) == StateMismatch(None)
        assert await store.get_challenge(missing.challenge_id) is None

    async def test_wrong_state_is_a_mismatch_and_writes_nothing(self, store: Store) -> None:
        record = make_record(state=State.EXPIRED)
        await created(store, record)
        request = dataclasses.replace(settling(record), claim_tx_hash=new_tx_hash())
        assert await store.transition(request) == StateMismatch(record)
        assert await store.get_challenge(record.challenge_id) == record
        assert request.claim_payment is not None
        assert await store.get_by_payment(request.claim_payment) is None
        assert request.claim_tx_hash is not None
        await tx_is_free(store, request.claim_tx_hash)

    async def test_attempt_id_must_match_the_settling_attempt(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        key = make_key()
        settled = applied(await store.transition(settling(record, key, attempt_id="attempt-1")))
        assert settled.payment is not None
        renewed_payment = dataclasses.replace(settled.payment, lease_until=BASE_TIME + 500)
        renew = settling_again(
            record,
            "attempt-2",
            reason="lease renewed",
            at=BASE_TIME + 15,
            changes=RecordChanges(payment=renewed_payment),
        )
        assert await store.transition(renew) == StateMismatch(settled)
        assert await store.get_challenge(record.challenge_id) == settled
        renewed = applied(
            await store.transition(dataclasses.replace(renew, attempt_id="attempt-1"))
        )
        assert renewed.payment == renewed_payment
        assert renewed.updated_at == BASE_TIME + 15
        assert renewed.history == (
            *settled.history,
            Transition(State.SETTLING, BASE_TIME + 15, "lease renewed"),
        )

    async def test_attempt_id_without_a_payment_is_a_mismatch(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        request = dataclasses.replace(settling(record), attempt_id="attempt-1")
        assert await store.transition(request) == StateMismatch(record)
        assert await store.get_challenge(record.challenge_id) == record

    async def _paid(self, store: Store, attempt_id: str) -> tuple[ChallengeRecord, PaymentKey, str]:
        """A PAID record whose payment was settled by ``attempt_id``, its key and txHash."""
        record, key, tx = make_record(), make_key(), new_tx_hash()
        await created(store, record)
        applied(await store.transition(settling(record, key, attempt_id=attempt_id)))
        return applied(await store.transition(paid(record, tx))), key, tx

    async def test_paid_to_paid_hands_the_delivery_claim_on(self, store: Store) -> None:
        """PAID -> PAID is compare-and-set on the attempt, like SETTLING -> SETTLING."""
        done, key, tx = await self._paid(store, "settle-1")
        claim = claiming_delivery(done, attempt_id="settle-1", new_attempt="deliver-1")
        claimed = applied(await store.transition(claim))
        assert claimed == done.apply(claim.changes, State.PAID, claim.at, claim.reason)
        assert claimed.payment is not None
        assert claimed.payment.attempt_id == "deliver-1"
        assert await store.get_by_payment(key) == claimed
        assert await store.get_by_tx_hash(tx) == claimed
        assert await store.list_challenges(states=[State.PAID]) == [claimed]
        again = claiming_delivery(done, attempt_id="settle-1", new_attempt="deliver-2")
        assert await store.transition(again) == StateMismatch(claimed)
        assert await store.get_challenge(done.challenge_id) == claimed

    async def test_delivery_with_an_attempt_needs_the_current_one(self, store: Store) -> None:
        done, _, _ = await self._paid(store, "settle-1")
        claim = claiming_delivery(done, attempt_id="settle-1", new_attempt="deliver-1")
        claimed = applied(await store.transition(claim))
        stale = delivering(claimed, attempt_id="settle-1")
        assert await store.transition(stale) == StateMismatch(claimed)
        assert await store.get_challenge(done.challenge_id) == claimed
        delivered = applied(await store.transition(delivering(claimed, attempt_id="deliver-1")))
        assert delivered.state is State.DELIVERED
        assert await store.transition(claim) == StateMismatch(delivered)

    async def test_one_of_racing_requests_takes_the_delivery_claim(self, store: Store) -> None:
        done, _, _ = await self._paid(store, "settle-1")
        claims = [
            claiming_delivery(done, attempt_id="settle-1", new_attempt=f"deliver-{i}")
            for i in range(RACERS)
        ]
        results = await asyncio.gather(*(store.transition(claim) for claim in claims))
        winners = [applied(r) for r in results if isinstance(r, TransitionApplied)]
        assert len(winners) == 1
        assert results.count(StateMismatch(winners[0])) == RACERS - 1
        assert await store.get_challenge(done.challenge_id) == winners[0]

    async def test_disallowed_transition_raises_and_writes_nothing(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        skip_ahead = dataclasses.replace(paid(record, new_tx_hash()), expect=State.PENDING)
        with pytest.raises(ValueError, match=WORDED):
            await store.transition(skip_ahead)
        key = make_key()
        with pytest.raises(ValueError, match=WORDED):
            await store.transition(dataclasses.replace(settling(record, key), to=State.DELIVERED))
        assert await store.get_challenge(record.challenge_id) == record
        assert await store.get_by_payment(key) is None
        assert skip_ahead.claim_tx_hash is not None
        await tx_is_free(store, skip_ahead.claim_tx_hash)

    async def test_transition_claims_the_payment(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        key = make_key()
        settled = applied(await store.transition(settling(record, key)))
        assert await store.get_by_payment(key) == settled

    async def test_claiming_our_own_payment_and_tx_again_is_fine(self, store: Store) -> None:
        key, tx = make_key(), new_tx_hash()
        record = make_record(state=State.SETTLING, payment=make_payment(key, attempt_id="a1"))
        await created(store, record, key)
        note = settling_again(
            record, "a1", reason="broadcast", at=BASE_TIME + 12, claim_payment=key, claim_tx_hash=tx
        )
        applied(await store.transition(note))
        done = applied(await store.transition(paid(record, "0x" + tx[2:].upper())))
        assert await store.get_by_payment(key) == done

    async def test_two_challenges_race_for_one_payment(self, store: Store) -> None:
        key = make_key()
        first, second = make_record(), make_record()
        await created(store, first)
        await created(store, second)
        results = await asyncio.gather(
            store.transition(settling(first, key)), store.transition(settling(second, key))
        )
        winners = [applied(r) for r in results if isinstance(r, TransitionApplied)]
        assert len(winners) == 1
        winner = winners[0]
        loser = second if winner.challenge_id == first.challenge_id else first
        assert PaymentClaimed(winner.challenge_id) in results
        assert await store.get_challenge(loser.challenge_id) == loser
        assert await store.get_by_payment(key) == winner

    async def test_payment_claimed_elsewhere_writes_nothing(self, store: Store) -> None:
        key = make_key()
        owner, other = make_record(), make_record()
        await created(store, owner, key)
        await created(store, other)
        request = dataclasses.replace(settling(other, key), claim_tx_hash=new_tx_hash())
        assert await store.transition(request) == PaymentClaimed(owner.challenge_id)
        assert await store.get_challenge(other.challenge_id) == other
        assert request.claim_tx_hash is not None
        await tx_is_free(store, request.claim_tx_hash)

    async def test_tx_hash_belongs_to_one_challenge(self, store: Store) -> None:
        tx = new_tx_hash()
        first, second = make_record(), make_record()
        await created(store, first)
        await created(store, second)
        applied(await store.transition(settling(first)))
        second_key = make_key()
        settling_second = applied(await store.transition(settling(second, second_key)))
        applied(await store.transition(paid(first, tx.lower())))
        request = dataclasses.replace(paid(second, "0x" + tx[2:].upper()), claim_payment=make_key())
        assert await store.transition(request) == TxClaimed(first.challenge_id)
        assert await store.get_challenge(second.challenge_id) == settling_second
        assert request.claim_payment is not None
        assert await store.get_by_payment(request.claim_payment) is None
        assert await store.get_by_payment(second_key) == settling_second

    async def test_release_frees_the_payment_for_another_challenge(self, store: Store) -> None:
        key = make_key()
        first, second = make_record(), make_record()
        await created(store, first)
        await created(store, second)
        applied(await store.transition(settling(first, key)))
        back = applied(await store.transition(back_to_pending(first)))
        assert back.state is State.PENDING
        assert back.payment is None
        assert await store.get_by_payment(key) is None
        taken = applied(await store.transition(settling(second, key)))
        assert await store.get_by_payment(key) == taken

    async def test_release_only_frees_a_claim_we_own(self, store: Store) -> None:
        key = make_key()
        first, second = make_record(), make_record()
        await created(store, first)
        await created(store, second)
        applied(await store.transition(settling(first, key, claim=False)))
        owner = applied(await store.transition(settling(second, key)))
        applied(await store.transition(back_to_pending(first)))
        assert await store.get_by_payment(key) == owner

    async def test_a_payment_given_back_keeps_its_claim_until_pruned(self, store: Store) -> None:
        """The pipeline's SETTLING -> PENDING (no ``release_payment``): the claim stays with
        the record, through expiry, so no other challenge takes the payment; it goes only
        with the record (docs/protocol/proof.md, "A payment given back"). The PENDING record
        keeps the payment too, and its expiry is a compare-and-set on the payment's attempt
        (docs/protocol/states.md, "A payment given back")."""
        key = make_key()
        first, second = make_record(), make_record()
        await created(store, first)
        await created(store, second)
        held = applied(await store.transition(settling(first, key)))
        back = applied(await store.transition(given_back(first)))
        assert (back.state, back.payment) == (State.PENDING, held.payment)
        assert await store.get_by_payment(key) == back
        assert held.payment is not None
        stale = dataclasses.replace(held.payment, attempt_id="another-attempt")
        assert await store.transition(
            expiring(dataclasses.replace(back, payment=stale))
        ) == StateMismatch(back)
        assert await store.transition(settling(second, key)) == PaymentClaimed(first.challenge_id)
        assert await store.create_challenge(make_record(), claim_payment=key) == PaymentClaimed(
            first.challenge_id
        )
        gone = applied(await store.transition(expiring(back)))
        assert gone.payment is None
        assert await store.get_by_payment(key) == gone
        assert await store.prune(states=[State.EXPIRED], updated_before=BASE_TIME + 1000) == 1
        assert await store.get_by_payment(key) is None
        taken = applied(await store.transition(settling(second, key)))
        assert await store.get_by_payment(key) == taken

    async def test_concurrent_transitions_have_one_winner(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        requests = [settling(record, make_key(), attempt_id=f"attempt-{i}") for i in range(RACERS)]
        results = await asyncio.gather(*(store.transition(r) for r in requests))
        winners = [applied(r) for r in results if isinstance(r, TransitionApplied)]
        assert len(winners) == 1
        winner = winners[0]
        assert results.count(StateMismatch(winner)) == RACERS - 1
        assert [t.state for t in winner.history] == [State.SETTLING]
        for request in requests:
            assert request.claim_payment is not None
            owner = await store.get_by_payment(request.claim_payment)
            if request.changes.payment == winner.payment:
                assert owner == winner
            else:
                assert owner is None

    # ------------------------------------------------------------ txHash lookup

    async def test_get_by_tx_hash_finds_the_owner_in_any_case(self, store: Store) -> None:
        record = make_record()
        await created(store, record)
        applied(await store.transition(settling(record)))
        tx = "0x" + new_tx_hash()[2:].upper()
        done = applied(await store.transition(paid(record, tx)))
        assert await store.get_by_tx_hash(tx) == done
        assert await store.get_by_tx_hash(tx.lower()) == done
        assert await store.get_by_tx_hash(new_tx_hash()) is None

    async def test_get_by_tx_hash_follows_later_transitions(self, store: Store) -> None:
        key, tx = make_key(), new_tx_hash()
        record = make_record(state=State.SETTLING, payment=make_payment(key, attempt_id="a1"))
        await created(store, record, key)
        note = settling_again(record, "a1", reason="broadcast", at=BASE_TIME + 12, claim_tx_hash=tx)
        noted = applied(await store.transition(note))
        assert await store.get_by_tx_hash(tx) == noted
        done = applied(await store.transition(paid(record, tx)))
        assert await store.get_by_tx_hash(tx) == done

    async def test_a_refused_tx_claim_keeps_its_owner(self, store: Store) -> None:
        tx = new_tx_hash()
        first, second = make_record(), make_record()
        for record in (first, second):
            await created(store, record)
            applied(await store.transition(settling(record)))
        owner = applied(await store.transition(paid(first, tx)))
        assert await store.transition(paid(second, tx)) == TxClaimed(first.challenge_id)
        assert await store.get_by_tx_hash(tx) == owner

    # ------------------------------------------------------------ prune

    async def _delivered(
        self, store: Store, *, at: float = BASE_TIME + 40
    ) -> tuple[ChallengeRecord, PaymentKey, str]:
        """A record taken through every claim-writing step, last updated ``at``."""
        record, key, tx = make_record(), make_key(), new_tx_hash()
        await created(store, record)
        applied(await store.transition(settling(record, key, at=at - 30)))
        done = applied(await store.transition(paid(record, tx, at=at - 20)))
        return applied(await store.transition(delivering(done, at=at))), key, tx

    async def test_prune_removes_the_record_with_its_index_and_claims(self, store: Store) -> None:
        gone, key, tx = await self._delivered(store)
        kept, kept_key, kept_tx = await self._delivered(store, at=BASE_TIME + 500)
        pruned = await store.prune(states=[State.DELIVERED], updated_before=BASE_TIME + 100)
        assert pruned == 1
        assert await store.get_challenge(gone.challenge_id) is None
        assert await store.get_by_request_id(gone.request_id) is None
        assert await store.get_by_payment(key) is None
        assert await store.get_by_tx_hash(tx) is None
        assert await store.list_challenges() == [kept]
        assert await store.get_by_payment(kept_key) == kept
        assert await store.get_by_tx_hash(kept_tx) == kept
        # The freed requestId, payment and txHash can be used again.
        again = make_record(request_id=gone.request_id)
        await created(store, again)
        applied(await store.transition(settling(again, key)))
        reused = applied(await store.transition(paid(again, tx)))
        assert await store.get_by_tx_hash(tx) == reused
        assert await store.get_by_request_id(gone.request_id) == reused

    async def test_prune_removes_a_claim_taken_at_creation(self, store: Store) -> None:
        key = make_key()
        record = make_record(state=State.EXPIRED)  # a claim without payment details
        await created(store, record, key)
        assert await store.prune(states=[State.EXPIRED], updated_before=BASE_TIME + 1) == 1
        assert await store.get_by_payment(key) is None
        await created(store, make_record(), key)

    async def test_prune_respects_states_and_age(self, store: Store) -> None:
        old_pending = make_record(at=BASE_TIME)
        old_expired = make_record(at=BASE_TIME + 1, state=State.EXPIRED)
        old_cancelled = make_record(at=BASE_TIME + 2, state=State.CANCELLED)
        young_expired = make_record(at=BASE_TIME + 10, state=State.EXPIRED)
        for record in (old_pending, old_expired, old_cancelled, young_expired):
            await created(store, record)
        assert await store.prune(states=[], updated_before=BASE_TIME + 100) == 0
        # ``updated_before`` is strict: a record updated exactly then stays.
        both = [State.EXPIRED, State.CANCELLED]
        assert await store.prune(states=both, updated_before=BASE_TIME + 1) == 0
        assert await store.prune(states=both, updated_before=BASE_TIME + 10) == 2
        assert await store.list_challenges() == [old_pending, young_expired]
        assert await store.prune(states=both, updated_before=BASE_TIME + 10) == 0

    async def test_prune_takes_the_oldest_first_up_to_the_limit(self, store: Store) -> None:
        records = [
            make_record(at=BASE_TIME + offset, state=State.EXPIRED) for offset in (3, 1, 4, 0, 2)
        ]
        for record in records:
            await created(store, record)
        ordered = sorted(records, key=lambda r: r.updated_at)
        expired = [State.EXPIRED]
        assert await store.prune(states=expired, updated_before=BASE_TIME + 9, limit=0) == 0
        assert await store.prune(states=expired, updated_before=BASE_TIME + 9, limit=2) == 2
        assert await store.list_challenges() == ordered[2:]
        assert await store.prune(states=expired, updated_before=BASE_TIME + 9, limit=10) == 3
        assert await store.list_challenges() == []

    async def test_prune_leaves_claims_that_moved_to_another_challenge(self, store: Store) -> None:
        key = make_key()
        released, owner = make_record(), make_record()
        await created(store, released)
        await created(store, owner)
        applied(await store.transition(settling(released, key)))
        applied(await store.transition(back_to_pending(released, at=BASE_TIME + 30)))
        taken = applied(await store.transition(settling(owner, key, at=BASE_TIME + 31)))
        assert await store.prune(states=[State.PENDING], updated_before=BASE_TIME + 100) == 1
        assert await store.get_challenge(released.challenge_id) is None
        assert await store.get_by_payment(key) == taken

    async def test_prune_racing_transitions_leaves_no_orphan_claims(self, store: Store) -> None:
        """Per record, prune and a claiming transition are each all-or-nothing."""
        records = [make_record() for _ in range(RACERS)]
        for record in records:
            await created(store, record)
        requests = [settling(record) for record in records]
        results = await asyncio.gather(
            store.prune(states=[State.PENDING], updated_before=BASE_TIME + 1),
            *(store.transition(request) for request in requests),
        )
        pruned, moves = results[0], results[1:]
        assert isinstance(pruned, int)
        moved = [r for r in moves if isinstance(r, TransitionApplied)]
        assert pruned + len(moved) == RACERS
        assert all(r == StateMismatch(None) for r in moves if not isinstance(r, TransitionApplied))
        for record, request, result in zip(records, requests, moves, strict=True):
            assert request.claim_payment is not None
            owner = await store.get_by_payment(request.claim_payment)
            stored = await store.get_challenge(record.challenge_id)
            if isinstance(result, TransitionApplied):
                assert owner == stored == result.record
            else:
                assert owner is None
                assert stored is None

    # ------------------------------------------------------------ A2A tasks

    async def test_task_is_created_only_if_absent(self, store: Store) -> None:
        first, second = {"id": "t-1", "status": "submitted"}, {"id": "t-1", "status": "other"}
        assert await store.save_task("t-1", first, expect_version=None) == 1
        assert await store.get_task("t-1") == (first, 1)
        assert await store.save_task("t-1", second, expect_version=None) is None
        assert await store.get_task("t-1") == (first, 1)

    async def test_task_replace_is_compare_and_set_on_the_version(self, store: Store) -> None:
        docs = [{"status": "submitted"}, {"status": "working"}, {"status": "completed"}]
        assert await store.save_task("t-2", docs[0], expect_version=None) == 1
        assert await store.save_task("t-2", docs[1], expect_version=1) == 2
        assert await store.save_task("t-2", docs[2], expect_version=1) is None
        assert await store.save_task("t-2", docs[2], expect_version=3) is None
        assert await store.get_task("t-2") == (docs[1], 2)
        assert await store.save_task("t-2", docs[2], expect_version=2) == 3
        assert await store.get_task("t-2") == (docs[2], 3)
        assert await store.save_task("missing", docs[0], expect_version=1) is None
        assert await store.get_task("missing") is None

    async def test_concurrent_task_updates_have_one_winner(self, store: Store) -> None:
        assert await store.save_task("t-3", {"n": -1}, expect_version=None) == 1
        results = await asyncio.gather(
            *(store.save_task("t-3", {"n": i}, expect_version=1) for i in range(RACERS))
        )
        assert sorted(results, key=lambda v: v or 0) == [None] * (RACERS - 1) + [2]
        winner = results.index(2)
        assert await store.get_task("t-3") == ({"n": winner}, 2)

    async def test_concurrent_task_creates_have_one_winner(self, store: Store) -> None:
        results = await asyncio.gather(
            *(store.save_task("t-4", {"n": i}, expect_version=None) for i in range(RACERS))
        )
        assert results.count(1) == 1
        assert results.count(None) == RACERS - 1
        assert await store.get_task("t-4") == ({"n": results.index(1)}, 1)

    async def test_task_documents_round_trip(self, store: Store) -> None:
        document: dict[str, Any] = {
            "id": "t-5",
            "contextId": "ctx",
            "kind": "task",
            "status": {"state": "input-required", "timestamp": "2026-11-21T10:15:00Z"},
            "history": [{"role": "user", "parts": [{"kind": "text", "text": "¡hola ☃ \u2028"}]}],
            "metadata": {
                "big": 2**70,
                "float": 0.1,
                "negative": -1.5,
                "flags": [True, False, None],
                "empty": {},
                "nested": [[], [{}], [[1, 2]]],
                "quote": 'a "quoted" \\ string',
            },
        }
        assert await store.save_task("t-5", document, expect_version=None) == 1
        stored = await store.get_task("t-5")
        assert stored is not None
        assert stored == (document, 1)
        returned: dict[str, Any] = stored[0]
        returned["status"]["state"] = "mutated"  # callers get their own copy
        assert await store.get_task("t-5") == (document, 1)

    async def test_a_document_that_is_not_json_is_refused(self, store: Store) -> None:
        with pytest.raises((TypeError, ValueError)):
            await store.save_task("t-6", {"value": object()}, expect_version=None)
        with pytest.raises((TypeError, ValueError)):
            await store.save_task("t-6", {"value": float("nan")}, expect_version=None)
        assert await store.get_task("t-6") is None

    async def test_prune_tasks_deletes_those_due_oldest_first(self, store: Store) -> None:
        due = {"late": BASE_TIME + 20, "early": BASE_TIME + 5, "edge": BASE_TIME + 30}
        for task_id, prune_after in due.items():
            saved = await store.save_task(
                task_id, {"id": task_id}, expect_version=None, prune_after=prune_after
            )
            assert saved == 1
        assert await store.save_task("kept", {"id": "kept"}, expect_version=None) == 1
        assert await store.prune_tasks(before=BASE_TIME + 30, limit=0) == 0
        assert await store.prune_tasks(before=BASE_TIME + 30, limit=1) == 1
        assert await store.get_task("early") is None
        assert await store.get_task("late") == ({"id": "late"}, 1)
        # ``before`` is strict: a task due exactly then stays.
        assert await store.prune_tasks(before=BASE_TIME + 30) == 1
        assert await store.get_task("late") is None
        assert await store.get_task("edge") == ({"id": "edge"}, 1)
        assert await store.prune_tasks(before=BASE_TIME + 10**9) == 1
        assert await store.get_task("edge") is None
        assert await store.get_task("kept") == ({"id": "kept"}, 1)  # no prune time: never
        assert await store.save_task("early", {"again": True}, expect_version=None) == 1

    async def test_each_task_save_sets_its_prune_time_anew(self, store: Store) -> None:
        soon, later, never = BASE_TIME + 10, BASE_TIME + 50, BASE_TIME + 10**9
        assert await store.save_task("t-7", {"n": 1}, expect_version=None, prune_after=soon) == 1
        assert await store.save_task("t-7", {"n": 2}, expect_version=1, prune_after=later) == 2
        assert await store.prune_tasks(before=BASE_TIME + 20) == 0
        assert await store.save_task("t-7", {"n": 3}, expect_version=2) == 3
        assert await store.prune_tasks(before=never) == 0
        # A save that loses its compare-and-set leaves the prune time as it was.
        for expect in (None, 1):
            lost = await store.save_task("t-7", {"n": 0}, expect_version=expect, prune_after=soon)
            assert lost is None
        assert await store.prune_tasks(before=never) == 0
        assert await store.get_task("t-7") == ({"n": 3}, 3)
        assert await store.save_task("t-7", {"n": 4}, expect_version=3, prune_after=soon) == 4
        assert await store.prune_tasks(before=soon + 1) == 1
        assert await store.get_task("t-7") is None
        assert await store.save_task("t-7", {"n": 5}, expect_version=4) is None

    async def test_prune_tasks_racing_saves(self, store: Store) -> None:
        """Per task, a save and the prune are each atomic: saved and kept, or gone."""
        ids = [f"race-{i}" for i in range(RACERS)]
        for task_id in ids:
            await store.save_task(task_id, {}, expect_version=None, prune_after=BASE_TIME)
        saving = [store.save_task(task_id, {"kept": True}, expect_version=1) for task_id in ids]
        half = RACERS // 2
        results = await asyncio.gather(
            *saving[:half], store.prune_tasks(before=BASE_TIME + 1), *saving[half:]
        )
        pruned, saves = results[half], results[:half] + results[half + 1 :]
        assert isinstance(pruned, int)
        assert pruned + saves.count(2) == RACERS
        for task_id, saved in zip(ids, saves, strict=True):
            expected = ({"kept": True}, 2) if saved == 2 else None
            assert await store.get_task(task_id) == expected

    # ------------------------------------------------------------ leases

    async def test_first_lease_has_fence_one_and_no_value(self, store: Store) -> None:
        lease = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert lease == Lease("gas-wallet", "worker-1", 1, BASE_TIME + 30, None)

    async def test_a_held_lease_is_exclusive_until_it_expires(self, store: Store) -> None:
        lease = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert lease is not None
        assert await store.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 29.9) is None
        assert await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME + 1) is None
        other = await store.acquire_lease("other-lease", "worker-2", 30, BASE_TIME)
        assert other is not None
        assert other.fence == 1
        taken = await store.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 30)
        assert taken == Lease("gas-wallet", "worker-2", 2, BASE_TIME + 60, None)

    async def test_release_hands_the_value_to_the_next_holder(self, store: Store) -> None:
        first = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert first is not None
        assert await store.release_lease(first, "nonce=7") is True
        second = await store.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 1)
        assert second == Lease("gas-wallet", "worker-2", 2, BASE_TIME + 31, "nonce=7")
        assert await store.release_lease(second, None) is True  # None keeps the value
        third = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME + 2)
        assert third is not None
        assert (third.fence, third.value) == (3, "nonce=7")

    async def test_a_stale_holder_cannot_release_after_takeover(self, store: Store) -> None:
        stale = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert stale is not None
        assert await store.release_lease(stale, "nonce=1") is True
        stale = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME + 1)
        assert stale is not None
        fresh = await store.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 40)
        assert fresh is not None
        assert fresh.fence == stale.fence + 1
        assert fresh.value == "nonce=1"
        assert await store.release_lease(stale, "nonce=99") is False
        assert await store.acquire_lease("gas-wallet", "worker-3", 30, BASE_TIME + 41) is None
        assert await store.release_lease(fresh, "nonce=2") is True
        after = await store.acquire_lease("gas-wallet", "worker-3", 30, BASE_TIME + 42)
        assert after is not None
        assert after.value == "nonce=2"

    async def test_an_expired_lease_not_taken_over_can_still_be_released(
        self, store: Store
    ) -> None:
        lease = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert lease is not None
        assert await store.release_lease(lease, "nonce=3") is True
        assert (
            await store.release_lease(dataclasses.replace(lease, holder="worker-2"), "x") is False
        )

    async def test_concurrent_acquires_have_one_winner(self, store: Store) -> None:
        results = await asyncio.gather(
            *(
                store.acquire_lease("gas-wallet", f"worker-{i}", 30, BASE_TIME)
                for i in range(RACERS)
            )
        )
        leases = [lease for lease in results if lease is not None]
        assert len(leases) == 1
        assert leases[0].fence == 1

    # ------------------------------------------------------------ durable stores

    async def test_everything_survives_reopening(self, store: Store, reopen: Reopen) -> None:
        record, key = full_record()
        await created(store, record, key)
        tx = new_tx_hash()
        assert record.payment is not None
        finish = dataclasses.replace(paid(record, tx), attempt_id=record.payment.attempt_id)
        done = applied(await store.transition(finish))
        lease = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert lease is not None
        assert await store.release_lease(lease, "nonce=5")
        reopened = await reopen()
        assert await reopened.get_challenge(record.challenge_id) == done
        assert await reopened.get_by_request_id(record.request_id) == done
        assert await reopened.get_by_payment(key) == done
        assert await reopened.list_challenges() == [done]
        other = make_record()
        await created(reopened, other)
        applied(await reopened.transition(settling(other)))
        assert await reopened.transition(paid(other, tx)) == TxClaimed(record.challenge_id)
        again = await reopened.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 1)
        assert again is not None
        assert (again.fence, again.value) == (2, "nonce=5")
        assert await reopened.get_by_tx_hash(tx) == done

    async def test_tasks_survive_reopening(self, store: Store, reopen: Reopen) -> None:
        assert await store.save_task("durable", {"status": "working"}, expect_version=None) == 1
        due = await store.save_task("due", {}, expect_version=None, prune_after=BASE_TIME)
        assert due == 1
        reopened = await reopen()
        assert await reopened.get_task("durable") == ({"status": "working"}, 1)
        assert await reopened.save_task("durable", {"status": "done"}, expect_version=1) == 2
        assert await reopened.prune_tasks(before=BASE_TIME + 1) == 1
        assert await reopened.get_task("due") is None

    async def test_two_instances_share_one_atomic_view(self, store: Store, second: Store) -> None:
        record = make_record()
        await created(store, record)
        assert await second.get_challenge(record.challenge_id) == record
        requests = [settling(record, make_key(), attempt_id=f"a-{i}") for i in range(RACERS)]
        results = await asyncio.gather(
            *(
                (store if i % 2 else second).transition(request)
                for i, request in enumerate(requests)
            )
        )
        assert sum(isinstance(r, TransitionApplied) for r in results) == 1
        request_id = make_record().request_id
        creates = await asyncio.gather(
            *(
                (store if i % 2 else second).create_challenge(make_record(request_id=request_id))
                for i in range(RACERS)
            )
        )
        assert sum(isinstance(r, tuple) and r[1] for r in creates) == 1
        leases = await asyncio.gather(
            *(
                (store if i % 2 else second).acquire_lease("gas-wallet", f"w{i}", 30, BASE_TIME)
                for i in range(RACERS)
            )
        )
        assert sum(lease is not None for lease in leases) == 1
        assert await store.save_task("shared", {"n": 0}, expect_version=None) == 1
        saves = await asyncio.gather(
            *(
                (store if i % 2 else second).save_task("shared", {"n": i}, expect_version=1)
                for i in range(RACERS)
            )
        )
        assert saves.count(2) == 1
        assert await second.get_task("shared") == ({"n": saves.index(2)}, 2)
