"""Lost compare-and-sets after the settler answered, and during delivery.

One named test per way out of ``AccessPipeline`` when a move it makes after
settling (release, PAID, the broadcast note, the end of its lease, a retry's
resolution) or while delivering (PAID -> DELIVERED, the delivery claim) loses
to a competitor: a reconciler pass or another worker, run by ``RacingStore``
against the real store (memory, then sqlite) just before that move. Each test
asserts the exact answer, the record's final state and history, and how often
the settler and the issuer ran. The clock is frozen; the settler is scripted and
its transfers really happen on anvil.
"""

from __future__ import annotations

import asyncio

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.racing import moving, states
from tests.support.rig import MakeRig, granted, outcome, problem
from tests.support.scripted import (
    CountingIssuer,
    GatedCallback,
    OnChain,
    ScriptedSettler,
    rejected_after,
    unknown_after,
)
from x402srv.access.records import ChallengeRecord, State
from x402srv.default_plugins.callback_issuer import CallbackIssuer
from x402srv.interfaces import (
    Settled,
    StateMismatch,
    TransitionRequest,
    TxClaimed,
    Unknown,
)

PENDING, SETTLING, PAID, DELIVERED = State.PENDING, State.SETTLING, State.PAID, State.DELIVERED


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    """Every race on both built-in stores: they share the rules, not the atomic machinery."""
    return str(request.param)


# ------------------------------------------------------------ step 8: after the settler


async def test_release_after_rejection_lost_to_the_chain_paying_grants(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The facilitator answered "rejected" although its transfer went through; another
    worker resolved the record PAID from the chain first. The release is lost, the claim
    stays, and the buyer gets the grant instead of a 402."""
    rig = await make_rig(settler=ScriptedSettler())
    rig.settler.then(OnChain(rig.devchain, rig.relayer, answer=rejected_after))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def chain_decides(request: TransitionRequest) -> object:
        return await rig.competitor().resolve(await rig.record(request.challenge_id))

    rig.store.before_transition(chain_decides, when=moving(SETTLING, PENDING))
    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING, PAID, DELIVERED]
    assert grant["txHash"] == record.tx_hash
    owner = await rig.store.inner.get_by_payment(rig.key(payment))
    assert owner is not None and owner.challenge_id == record.challenge_id


async def test_paid_lost_to_a_reconciler_that_delivered_answers_with_its_grant(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The settler answered Settled, but a reconciler pass had already resolved the record
    from the chain and delivered it: SETTLING -> PAID is lost and the buyer gets the stored
    grant; the credential was issued once."""
    rig = await make_rig(settler=ScriptedSettler(), issuer=CountingIssuer)
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def reconciler_delivers(request: TransitionRequest) -> object:
        return await rig.reconciled(request.challenge_id)

    race = rig.store.before_transition(reconciler_delivers, when=moving(SETTLING, PAID))
    grant = granted(await outcome(rig.pay(payment)))

    delivered = race.results[0]
    assert isinstance(delivered, ChallengeRecord) and delivered.state is DELIVERED
    assert grant == delivered.grant
    assert isinstance(rig.issuer, CountingIssuer) and rig.issuer.calls == 1
    record = await rig.record(challenge["challengeId"])
    assert states(record).count(PAID) == 1
    assert states(record)[-1] is DELIVERED


async def test_broadcast_note_lost_still_lands_on_the_record_as_it_is_now(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The transfer was mined before the settler could note its broadcast, and a reconciler
    pass delivered the record in between: the note is lost (nothing raised), the settler's
    Settled answer loses too, and the request answers with the stored grant."""
    rig = await make_rig(settler=ScriptedSettler(), issuer=CountingIssuer)
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def reconciler_delivers(request: TransitionRequest) -> object:
        return await rig.reconciled(request.challenge_id)

    race = rig.store.before_transition(
        reconciler_delivers, when=moving(SETTLING, SETTLING, "transaction broadcast")
    )
    grant = granted(await outcome(rig.pay(payment)))

    delivered = race.results[0]
    assert isinstance(delivered, ChallengeRecord) and grant == delivered.grant
    assert isinstance(rig.issuer, CountingIssuer) and rig.issuer.calls == 1
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, PAID, DELIVERED]
    assert record.payment is not None and record.payment.broadcast_tx_hash is None


async def test_a_settler_naming_another_challenges_transaction_is_not_believed(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A settler that names a transaction which paid another challenge (and did not use this
    authorization): the core checks every Settled on-chain, so nothing is claimed; the
    outcome is unknown, its lease ends at once and the chain decides (502 for now)."""
    rig = await make_rig(settler=ScriptedSettler())
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    first = await rig.challenge()
    granted(await outcome(rig.pay(rig.sign(buyer, first["accepts"][0]))))
    paid = await rig.record(first["challengeId"])
    assert paid.tx_hash is not None and paid.payer is not None

    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    rig.settler.then(Settled(paid.tx_hash, paid.payer))
    answer = await outcome(rig.pay(payment))

    problem(answer, 502, "SETTLEMENT_PENDING")
    moves = [q for q, _ in rig.store.transitions if q.challenge_id == challenge["challengeId"]]
    assert not any(q.claim_tx_hash for q in moves), "the txHash is never claimed"
    record = await rig.record(challenge["challengeId"])
    assert record.state is SETTLING
    assert record.payment is not None
    assert record.payment.lease_until <= rig.clock()
    assert record.tx_hash is None
    owner = await rig.store.inner.get_by_tx_hash(paid.tx_hash)
    assert owner is not None and owner.challenge_id == first["challengeId"]
    assert not rig.devchain.authorization_state(buyer.address, payment.nonce)


async def test_without_an_rpc_a_transaction_another_challenge_owns_is_409_redeemed(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """No RPC to confirm with: the txHash claim is what stops a settler from paying two
    challenges with one transfer (409); the settler's lease ends, the record stays SETTLING."""
    rig = await make_rig(settler=ScriptedSettler(), chain=False)
    tx_hash = "0x" + "ab" * 32
    first = await rig.challenge()
    rig.settler.then(Settled(tx_hash, buyer.address))
    granted(await outcome(rig.pay(rig.sign(buyer, first["accepts"][0]))))

    challenge = await rig.challenge()
    rig.settler.then(Settled(tx_hash, buyer.address))
    answer = await outcome(rig.pay(rig.sign(buyer, challenge["accepts"][0])))

    problem(answer, 409, "TX_ALREADY_REDEEMED")
    claim = [r for q, r in rig.store.transitions if q.challenge_id == challenge["challengeId"]]
    assert claim[-2] == TxClaimed(first["challengeId"])
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING]
    assert record.payment is not None
    assert record.payment.lease_until <= rig.clock()
    assert record.tx_hash is None


async def test_end_lease_lost_answers_from_the_record_as_it_is_now(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The settler timed out after broadcasting; before this request could end its lease, a
    reconciler pass resolved and delivered the record. Ending the lease is lost, and the
    request answers from DELIVERED: the stored grant, one issuance."""
    rig = await make_rig(settler=ScriptedSettler(), issuer=CountingIssuer)
    rig.settler.then(OnChain(rig.devchain, rig.relayer, answer=unknown_after))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def reconciler_delivers(request: TransitionRequest) -> object:
        return await rig.reconciled(request.challenge_id)

    race = rig.store.before_transition(
        reconciler_delivers, when=moving(SETTLING, SETTLING, "outcome unknown")
    )
    grant = granted(await outcome(rig.pay(payment)))

    delivered = race.results[0]
    assert isinstance(delivered, ChallengeRecord)
    assert grant == delivered.grant
    assert isinstance(rig.issuer, CountingIssuer) and rig.issuer.calls == 1
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING, PAID, DELIVERED]
    assert "outcome unknown" not in " ".join(step.reason for step in record.history)


async def test_retry_resolution_lost_to_a_reconciler_answers_with_its_grant(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A proven retry finds the record SETTLING and the transfer on-chain; while it marks it
    PAID, a reconciler pass does the same and delivers. The retry's resolution is lost and
    it answers from DELIVERED with that grant."""
    rig = await make_rig(settler=ScriptedSettler(Unknown("facilitator timed out")))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
    rig.settle_on_chain(payment)  # the facilitator's transfer lands after its timeout

    async def reconciler_delivers(request: TransitionRequest) -> object:
        return await rig.reconciled(request.challenge_id)

    race = rig.store.before_transition(reconciler_delivers, when=moving(SETTLING, PAID))
    grant = granted(await outcome(rig.pay(None, request_id=challenge["requestId"])))

    delivered = race.results[0]
    assert isinstance(delivered, ChallengeRecord) and grant == delivered.grant
    (ours,) = [result for request, result in rig.store.transitions if request.to is PAID]
    assert isinstance(ours, StateMismatch)
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING, PAID, DELIVERED]


# ------------------------------------------------------------ step 10: delivery


async def test_delivery_lost_to_another_delivery_answers_with_the_stored_grant(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A non-exclusive issuer (like jwt) lets two requests issue; the other stored its grant
    first, so PAID -> DELIVERED is lost and this request answers with the STORED grant, not
    the credential it just made: every answer for a challenge is the same grant."""
    rig = await make_rig(
        settler=ScriptedSettler(), issuer=lambda c: CountingIssuer(c, label="ours")
    )
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    issuer, theirs = rig.issuer, CountingIssuer(rig.clock, label="theirs")
    assert isinstance(issuer, CountingIssuer)

    async def other_delivers(request: TransitionRequest) -> object:
        other = rig.competitor(issuer=theirs)
        return await other.deliver(await rig.record(request.challenge_id))

    rig.store.before_transition(other_delivers, when=moving(PAID, DELIVERED))
    grant = granted(await outcome(rig.pay(payment)))

    assert (issuer.tokens, theirs.tokens) == (["ours-1"], ["theirs-1"])
    assert grant["accessToken"] == "theirs-1"
    record = await rig.record(challenge["challengeId"])
    assert record.grant == grant
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING, PAID, DELIVERED]


async def test_delivery_claim_lost_waits_for_the_holder_and_gets_its_grant(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """With an exclusive issuer (callback), another worker took the delivery claim first:
    this request waits for it instead of calling the seller's function, and both answer
    with the one grant; the function ran once."""
    seller = GatedCallback()
    rig = await make_rig(
        settler=ScriptedSettler(),
        issuer=lambda clock: CallbackIssuer(seller, spec="gated", clock=clock, timeout_seconds=30),
    )
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    claimed = asyncio.Event()

    async def other_claims(request: TransitionRequest) -> object:
        other = rig.competitor()
        holder = asyncio.create_task(other.deliver(await rig.record(request.challenge_id)))
        await seller.entered.wait()  # it holds the claim and is inside the seller's function
        rig.store.forget_calls()
        claimed.set()
        return holder

    race = rig.store.before_transition(other_claims, when=moving(PAID, PAID))
    request = asyncio.create_task(outcome(rig.pay(payment)))
    await claimed.wait()
    await rig.store.called("get_challenge")  # this request now waits for the holder
    assert not request.done() and len(seller.calls) == 1
    seller.release.set()
    grant = granted(await request)
    holder = race.results[0]
    assert isinstance(holder, asyncio.Task)
    delivered = await holder

    assert len(seller.calls) == 1
    assert delivered.grant == grant
    record = await rig.record(challenge["challengeId"])
    assert states(record).count(DELIVERED) == 1
