"""A payment a settler gave back is watched until the chain can no longer move it.

The settler that refused it, or could not take it, was handed the whole
authorization; so may be anyone who reads its logs, and any of them can send it
to the token until its ``validBefore``: the buyer's money then reaches the
seller. Regression: the record dropped the payment when it went back to
PENDING, so such a transfer paid for nothing. The challenge expired (or was
cancelled) unasked, and a new payment of the buyer's was settled too: the buyer
paid twice for one grant. Now the record keeps the payment, and the chain is
asked before the record ends or takes another (docs/protocol/states.md, "A
payment given back"). The settler is scripted (a facilitator cannot be made to
fail on cue); the transfers and the chain's answers are anvil's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.racing import moving
from tests.support.rig import MakeRig, Payment, Rig, granted, open_rig, outcome, problem
from tests.support.scripted import OnChain, ScriptedSettler
from x402srv.access.given_back import cancel_waits
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import State
from x402srv.admin.service import AdminService
from x402srv.cli.audit import audit
from x402srv.devchain import Devchain
from x402srv.interfaces import Rejected, TransitionRequest
from x402srv.server.health import Readiness
from x402srv.settlement.per_network import NetworkSettlers
from x402srv.wire.protocol import AccessBody
from x402srv.wire.reasons import Reason

#: No settler of the network could take the payment: it is fine, send it again later.
UNAVAILABLE = Rejected("unexpected_verify_error", "The facilitator timed out.", settler_failed=True)


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def given_back(rig: Rig, buyer: LocalAccount, **sign: Any) -> tuple[dict[str, Any], Payment]:
    """A challenge whose payment no settler could take (503): PENDING, the payment kept."""
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0], **sign)
    problem(await outcome(rig.pay(payment)), 503, "SETTLER_UNAVAILABLE")
    record = await rig.record(challenge["challengeId"])
    assert record.state is State.PENDING and record.payment is not None
    return challenge, payment


def past_expiry(rig: Rig) -> None:
    rig.clock.advance(rig.config.server.challenge_ttl_seconds + 1)


async def test_a_new_payment_after_a_copier_sent_the_one_given_back_is_not_taken(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The buyer signs a new authorization after the 503, as a client told "or sign a new
    payment" does; a copier had sent the first to the token meanwhile. The grant comes on
    the copier's transfer and the new authorization is never settled: paid once."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))  # it would settle the new one
    challenge, payment = await given_back(rig, buyer)
    tx_hash = rig.settle_on_chain(payment)  # what a copier can do until validBefore

    fresh = rig.sign(buyer, challenge["accepts"][0])
    grant = granted(await outcome(rig.pay(fresh)))

    assert grant["challengeId"] == challenge["challengeId"]
    assert grant["txHash"].lower() == tx_hash.lower()
    assert not rig.devchain.authorization_state(buyer.address, fresh.nonce), "paid twice"
    assert len(rig.settler.requests) == 1


async def test_the_buyer_s_retry_of_a_payment_given_back_and_sent_since_is_not_settled_again(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The same payment again, as the 503 says: the chain shows it moved, so it is PAID on that
    transfer without a second hand-over to a settler."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    _, payment = await given_back(rig, buyer)
    tx_hash = rig.settle_on_chain(payment)

    grant = granted(await outcome(rig.pay(payment)))

    assert grant["txHash"].lower() == tx_hash.lower()
    assert len(rig.settler.requests) == 1


async def test_a_payment_given_back_and_sent_to_the_token_is_delivered_when_its_challenge_expires(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The buyer never comes back: the reconciler's pass over the expired challenge finds the
    transfer and delivers; the buyer's requestId fetches the grant. The audit first names the
    transfer as the reconciler's to finish, then is clean. (Regression: the pass expired the
    challenge, and the audit could only say "no purchase paid with it".)"""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    challenge, payment = await given_back(rig, buyer)
    first_block = rig.devchain.rpc.block_number() + 1
    tx_hash = rig.settle_on_chain(payment)

    before = await audit(rig.pipeline, from_block=first_block, to_block=None)
    [(_, why)] = before.unmatched
    assert why.startswith(
        f"its authorization was given back by challenge {challenge['challengeId']}"
    )
    assert "x402srv reconcile once the challenge is past expiresAt" in why

    past_expiry(rig)
    report = await Reconciler(rig.pipeline, rig.config.reconciler).run_once()

    record = await rig.record(challenge["challengeId"])
    assert record.state is State.DELIVERED and record.tx_hash == tx_hash.lower()
    assert [change.after for change in report.changes] == [State.PAID, State.DELIVERED]
    fetched = await rig.pipeline.access(
        AccessBody("hourly", challenge["requestId"], "default"), None
    )
    assert granted(fetched)["txHash"] == record.tx_hash
    assert (await audit(rig.pipeline, from_block=first_block, to_block=None)).clean


async def test_a_copy_sent_past_expires_at_makes_no_chain_read_and_ends_nothing(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Only the buyer's request has the chain asked about a kept payment: a copier could
    otherwise make the server read the chain as often as it likes."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    challenge, _ = await given_back(rig, buyer)
    [seen] = rig.settler.requests  # what the settler was handed: our ids removed
    copy = Payment.of(dict(seen.payload))
    past_expiry(rig)
    reads = len(rig.rpc.methods)

    problem(
        await outcome(rig.pay(copy, challenge_id=challenge["challengeId"])),
        410,
        "CHALLENGE_EXPIRED",
    )

    assert len(rig.rpc.methods) == reads
    assert (await rig.record(challenge["challengeId"])).state is State.PENDING


async def test_an_operator_cancels_a_challenge_only_once_its_payment_given_back_cannot_move(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Cancelled while the payment may still move, a transfer after would pay for nothing: the
    cancellation waits (and says until when); once the chain shows the transfer, the same
    cancellation delivers the purchase instead."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    challenge, payment = await given_back(rig, buyer)

    waiting, now = await rig.pipeline.cancel(challenge["challengeId"], "cancelled by test")

    assert (waiting.state, now) == (State.PENDING, False)
    assert payment.authorization["validBefore"] in cancel_waits(waiting)
    rig.settle_on_chain(payment)
    delivered, now = await rig.pipeline.cancel(challenge["challengeId"], "cancelled by test")
    assert (delivered.state, now) == (State.DELIVERED, False)


async def test_a_challenge_expires_only_once_the_chain_shows_its_payment_given_back_unused(
    own_chain: Devchain, tmp_path: Path, store_backend: str
) -> None:
    """A payment made late in its challenge's life is valid past ``expiresAt``: the challenge
    answers 410 but stays PENDING (neither the buyer's retry nor a reconciler pass ends it)
    until the chain is past the payment's ``validBefore`` with the authorization unused;
    then the buyer's retry expires it and the payment goes. (Regression: the retry expired
    it at ``expiresAt``, and a copy sent to the token after paid for nothing.) On an anvil
    of its own: the chain is moved past ``validBefore``."""
    buyer = own_chain.new_account()
    settler = ScriptedSettler(UNAVAILABLE)
    async with open_rig(own_chain, tmp_path, settler=settler, store=store_backend) as rig:
        challenge = await rig.challenge()
        rig.clock.advance(rig.config.server.challenge_ttl_seconds - 10)  # late in its life
        payment = rig.sign(buyer, challenge["accepts"][0], valid_before=int(rig.clock()) + 300)
        problem(await outcome(rig.pay(payment)), 503, "SETTLER_UNAVAILABLE")
        rig.clock.advance(20)  # past expiresAt, long before validBefore
        reconciler = Reconciler(rig.pipeline, rig.config.reconciler)

        retry = await outcome(rig.pay(payment))
        passed = await reconciler.run_once()

        problem(retry, 410, "CHALLENGE_EXPIRED")
        assert passed.changes == []
        assert (await rig.record(challenge["challengeId"])).state is State.PENDING

        valid_before = int(payment.authorization["validBefore"])
        own_chain.mine_ahead(2, seconds_apart=valid_before - own_chain.block_timestamp() + 1)
        assert own_chain.block_timestamp() >= valid_before
        problem(await outcome(rig.pay(payment)), 410, "CHALLENGE_EXPIRED")

        record = await rig.record(challenge["challengeId"])
        assert record.state is State.EXPIRED and record.payment is None


#: The settler says the authorization is used; with no chain reader its word is all there is.
NONCE_USED = Rejected(Reason.NONCE_USED, "This authorization was already used or cancelled.")


async def test_a_cancellation_lost_to_a_new_payment_given_back_cancels_instead_of_a_500(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """An operator cancels a challenge that kept a payment (no chain reader: nothing to wait
    for) just as its buyer's new payment is claimed and refused, which leaves the record
    PENDING without a payment. Regression: the cancellation's compare-and-set on the kept
    payment's attempt was lost, the admin API asserted the record held a payment and
    answered 500 (the CLI likewise). Now it is made again on the record as it is."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE), chain=False)
    challenge, _ = await given_back(rig, buyer)
    buyer_worker = rig.competitor(settler=ScriptedSettler(NONCE_USED), chain=False)
    fresh = rig.sign(buyer, challenge["accepts"][0])

    async def buyer_pays_again(_: TransitionRequest) -> None:
        answer = rig.pay(fresh, request_id=challenge["requestId"], pipeline=buyer_worker)
        problem(await outcome(answer), 402, "PAYMENT_FAILED")
        assert (await rig.record(challenge["challengeId"])).payment is None

    race = rig.store.before_transition(
        buyer_pays_again, when=moving(State.PENDING, State.CANCELLED)
    )
    # (readiness is never asked by a cancellation: a real one of nothing)
    service = AdminService(
        rig.pipeline, Readiness(rig.store, {}, NetworkSettlers({}, {}), cache_seconds=1.0)
    )

    page = await service.cancel(challenge["challengeId"], "operator")

    assert race.fired == 1
    assert page["cancelledNow"] is True and page["state"] == "CANCELLED"
    assert (await rig.record(challenge["challengeId"])).state is State.CANCELLED


async def test_a_cancellation_lost_to_another_payment_given_back_is_decided_on_that_one(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The same race, the buyer's new payment given back too (503): the record keeps that one
    instead. With no chain reader nothing is watched, so the cancellation goes through.
    Regression: it was refused as if the first payment could still move, citing its
    validBefore."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE), chain=False)
    challenge, payment = await given_back(rig, buyer)
    buyer_worker = rig.competitor(settler=ScriptedSettler(UNAVAILABLE), chain=False)
    fresh = rig.sign(buyer, challenge["accepts"][0])

    async def buyer_pays_again(_: TransitionRequest) -> None:
        answer = rig.pay(fresh, request_id=challenge["requestId"], pipeline=buyer_worker)
        problem(await outcome(answer), 503, "SETTLER_UNAVAILABLE")

    rig.store.before_transition(buyer_pays_again, when=moving(State.PENDING, State.CANCELLED))

    cancelled, now = await rig.pipeline.cancel(challenge["challengeId"], "cancelled by test")

    assert (cancelled.state, now) == (State.CANCELLED, True)
    assert payment.nonce != fresh.nonce


async def test_a_buyer_back_past_expires_at_with_a_new_payment_gets_the_grant_of_the_one_sent(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A client told "or sign a new payment" comes back after ``expiresAt`` with a new
    authorization, proving the purchase with its ``accepted.extra.requestId``; a copier sent
    the one given back meanwhile. The grant comes on that transfer, in this answer, as it does
    before ``expiresAt``. Regression: the chain made the record PAID, then the PAID step asked
    the new authorization to be the stored one: 409 "already paid, with another payment", for
    this request and every retry with it, and the grant left undelivered."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    challenge, payment = await given_back(rig, buyer)
    tx_hash = rig.settle_on_chain(payment)
    past_expiry(rig)
    fresh = rig.sign(buyer, challenge["accepts"][0])

    grant = granted(await outcome(rig.pay(fresh)))

    assert grant["challengeId"] == challenge["challengeId"]
    assert grant["txHash"].lower() == tx_hash.lower()
    assert not rig.devchain.authorization_state(buyer.address, fresh.nonce), "paid twice"
    assert (await rig.record(challenge["challengeId"])).state is State.DELIVERED
