"""What the pipeline makes of each thing a settler can do: settle, reject, not know, raise, hang.

The settler is scripted (a facilitator cannot be told to time out or hang on
cue); where the answer claims a transfer, the transfer really happened on anvil
first, so the chain reads that follow are real. The clock is frozen; only the
hang test lets real time pass, because ``asyncio.wait_for`` is what cuts it off.
"""

from __future__ import annotations

import time

from eth_account.signers.local import LocalAccount

from tests.support.racing import states
from tests.support.rig import MakeRig, granted, outcome, problem
from tests.support.scripted import (
    HANG,
    OnChain,
    ScriptedSettler,
    unknown_after,
    wire,
)
from x402srv.access.pipeline import PENDING_RETRY_AFTER
from x402srv.access.records import State
from x402srv.devchain import encode_call, settle_on_chain, sign_cancel_authorization
from x402srv.interfaces import (
    Rejected,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Unknown,
)
from x402srv.wire.reasons import Reason

PENDING, SETTLING, PAID, DELIVERED = State.PENDING, State.SETTLING, State.PAID, State.DELIVERED
HANDED_OVER = [PENDING, SETTLING, SETTLING]  # created, claimed, handed to the settler


async def test_settled_delivers_once_with_the_real_transaction(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Settled(tx): PAID with the txHash claimed, then DELIVERED; the grant names that tx."""
    rig = await make_rig(settler=ScriptedSettler())
    step = OnChain(rig.devchain, rig.relayer)
    rig.settler.then(step)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING, PAID, DELIVERED]  # + the broadcast
    assert grant["txHash"] == record.tx_hash == step.tx_hash
    assert record.grant == grant
    owner = await rig.store.inner.get_by_tx_hash(grant["txHash"])
    assert owner is not None and owner.challenge_id == challenge["challengeId"]
    assert rig.devchain.balance_of(rig.wallet) == int(challenge["accepts"][0]["amount"])
    assert len(rig.settler.requests) == 1


async def test_rejected_goes_back_to_pending_and_answers_402(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Rejected: SETTLING -> PENDING, 402 PAYMENT_FAILED with the settler's reason, the claim
    kept by the challenge (the settler saw the payment: no other purchase takes it); the buyer
    can then pay the same challenge with a new authorization."""
    rig = await make_rig(settler=ScriptedSettler(Rejected("insufficient_funds", "No funds.")))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    answer = await outcome(rig.pay(payment))

    assert problem(answer, 402, "PAYMENT_FAILED").extra["reason"] == "insufficient_funds"
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, PENDING]
    assert record.payment is not None and record.payment.nonce == payment.nonce  # watched
    owner = await rig.store.inner.get_by_payment(rig.key(payment))
    assert owner is not None and owner.challenge_id == challenge["challengeId"]
    assert not rig.devchain.authorization_state(buyer.address, payment.nonce)

    again = rig.sign(buyer, challenge["accepts"][0])
    grant = granted(await outcome(rig.pay(again)))
    assert grant["challengeId"] == challenge["challengeId"]
    assert rig.devchain.authorization_state(buyer.address, again.nonce)


async def test_unknown_stays_settling_and_answers_502_until_the_chain_decides(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Unknown with nothing on-chain: the lease ends, the record stays SETTLING with the
    claim held, 502 SETTLEMENT_PENDING; retries never hand it to the settler again, and the
    first retry after the (late) transfer gets the grant."""
    rig = await make_rig(settler=ScriptedSettler(Unknown("facilitator timed out")))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    answer = await outcome(rig.pay(payment))

    assert problem(answer, 502, "SETTLEMENT_PENDING").retry_after == PENDING_RETRY_AFTER
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING]  # + the lease ended
    assert record.history[-1].reason == "outcome unknown: facilitator timed out"
    assert record.payment is not None and record.payment.submitted
    assert record.payment.lease_until == rig.clock()
    assert await rig.store.inner.get_by_payment(rig.key(payment)) is not None
    problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")

    tx_hash = rig.settle_on_chain(payment)  # the facilitator's transfer lands after all
    grant = granted(await outcome(rig.pay(payment)))

    assert grant["txHash"] == tx_hash
    assert len(rig.settler.requests) == 1


async def test_unknown_after_a_broadcast_is_resolved_from_the_chain_at_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Unknown after the transfer was broadcast (and mined): the same request ends its lease,
    reads the chain through the broadcast hint and answers with the grant."""
    rig = await make_rig(settler=ScriptedSettler())
    step = OnChain(rig.devchain, rig.relayer, answer=unknown_after)
    rig.settler.then(step)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING, SETTLING, PAID, DELIVERED]
    assert [step.reason for step in record.history[3:5]] == [
        "transaction broadcast",
        "outcome unknown: facilitator timed out",
    ]
    assert record.history[5].reason == "resolved from chain: transferred"
    assert grant["txHash"] == step.tx_hash
    assert record.payment is not None and record.payment.broadcast_tx_hash == step.tx_hash


async def test_settler_that_raises_is_treated_as_unknown(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A settler must not raise; if it does it may have broadcast, so the claim is never
    released: SETTLING, 502 SETTLEMENT_PENDING."""
    rig = await make_rig(settler=ScriptedSettler(RuntimeError("facilitator client bug")))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    answer = await outcome(rig.pay(payment))

    problem(answer, 502, "SETTLEMENT_PENDING")
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING]
    assert record.history[-1].reason == "outcome unknown: settler raised"
    assert await rig.store.inner.get_by_payment(rig.key(payment)) is not None


async def test_settler_that_raises_after_its_transfer_still_delivers(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The dangerous raise: the transfer is on-chain, then the settler blows up. Treated as
    unknown, the chain decides at once and the buyer gets its grant in the same request."""
    rig = await make_rig(settler=ScriptedSettler())

    async def transfer_then_raise(
        request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        auth = request.authorization
        settle_on_chain(rig.devchain, rig.relayer, wire(auth), auth.signature)
        raise ConnectionResetError("connection lost while reading the receipt")

    rig.settler.then(transfer_then_raise)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING, PAID, DELIVERED]
    assert record.history[3].reason == "outcome unknown: settler raised"
    assert grant["txHash"] == record.tx_hash
    assert rig.devchain.authorization_state(buyer.address, payment.nonce)


async def test_settler_that_hangs_is_cut_off_within_its_lease(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A settler that never answers is cancelled after the lease budget (lease - 2 s), so the
    request answers 502 while its lease still holds and nobody else can release the claim
    under it. The smallest lease (5 s) makes this the one test that waits ~3 s of real time:
    ``asyncio.wait_for`` measures the loop's clock, not the pipeline's. No chain is needed."""
    rig = await make_rig(settler=ScriptedSettler(HANG), lease_seconds=5, chain=False)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    started = time.monotonic()
    answer = await outcome(rig.pay(payment))
    elapsed = time.monotonic() - started

    problem(answer, 502, "SETTLEMENT_PENDING")
    assert rig.settler.cancelled == 1
    assert 3.0 <= elapsed < rig.config.settlement.lease_seconds
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, SETTLING]
    assert (
        record.history[-1].reason == "outcome unknown: settlement did not finish within the lease"
    )
    assert record.payment is not None and record.payment.lease_until == rig.clock()
    assert rig.rpc.methods == []


async def test_already_used_from_a_settler_is_decided_by_the_chain(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Regression: a settler that answers "nonce already used" is not a refusal. The payment
    may be this very one, settled by a settler we gave up on (a facilitator that settled
    after its timeout): the chain decides, and here it shows the transfer, so the buyer
    gets its grant for that transaction, in the same request, and nothing is paid twice."""
    rig = await make_rig(settler=ScriptedSettler())
    late: list[str] = []

    async def settled_elsewhere(
        request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        auth = request.authorization  # another settler's transfer, which we never heard of
        late.append(settle_on_chain(rig.devchain, rig.relayer, wire(auth), auth.signature))
        return Rejected(Reason.NONCE_USED, "This authorization was already used or cancelled.")

    rig.settler.then(settled_elsewhere)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    paid_before = rig.devchain.balance_of(rig.wallet)

    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, PAID, DELIVERED]
    assert grant["txHash"] == record.tx_hash == late[0]
    assert record.history[3].reason.startswith("settled on-chain by an earlier settlement")
    assert rig.devchain.balance_of(rig.wallet) - paid_before == int(record.amount)
    assert len(rig.settler.requests) == 1


async def test_already_used_because_the_buyer_cancelled_it_is_refused(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The other side of it: the chain shows the authorization cancelled by its payer, so
    the settler's "already used" stands: 402, back to PENDING, nothing granted."""
    rig = await make_rig(settler=ScriptedSettler())
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def cancelled_first(
        request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        nonce = bytes.fromhex(payment.nonce[2:])
        signature = sign_cancel_authorization(buyer, rig.devchain.token, nonce)
        call = encode_call(
            "cancelAuthorization(address,bytes32,bytes)",
            buyer.address,
            nonce,
            bytes.fromhex(signature[2:]),
        )
        rig.devchain.rpc.send_transaction(rig.relayer, to=rig.devchain.token.address, data=call)
        return Rejected(Reason.NONCE_USED, "This authorization was already used or cancelled.")

    rig.settler.then(cancelled_first)

    answer = await outcome(rig.pay(payment))

    assert problem(answer, 402, "PAYMENT_FAILED").extra["reason"] == Reason.NONCE_USED
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [*HANDED_OVER, PENDING]
    assert record.payment is None
    assert len(rig.settler.requests) == 1
