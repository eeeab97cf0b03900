"""One transaction that settles two authorizations (a batching facilitator, a multicall).

docs/protocol/states.md: a challenge is matched by its own authorization's ``AuthorizationUsed``
and ``Transfer`` in the transaction, never by the transaction hash alone. The
batch really happens on anvil, through our BatchSettle contract; the facilitator
around it is scripted.
"""

from __future__ import annotations

import asyncio

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, Payment, Rig, granted, outcome, problem
from tests.support.scripted import Batching, ScriptedSettler, unknown_after
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import ChallengeRecord, State
from x402srv.cli.audit import audit
from x402srv.devchain import Devchain
from x402srv.interfaces import Unknown


async def two_payments(rig: Rig, devchain: Devchain, payers: str) -> list[tuple[str, Payment]]:
    """Two challenges of the same plan, each paid by its own authorization of the same value
    (by one payer or by two): (challengeId, payment) for each."""
    first = devchain.new_account()
    second = first if payers == "same payer" else devchain.new_account()
    paid = []
    for buyer in (first, second):
        challenge = await rig.challenge()
        paid.append((challenge["challengeId"], rig.sign(buyer, challenge["accepts"][0])))
    return paid


def shared_with(record: ChallengeRecord) -> str | None:
    """The challenge whose txHash claim this record shares, per its history."""
    for step in record.history:
        if "transaction shared with challenge " in step.reason:
            return step.reason.rsplit(" ", 1)[-1]
    return None


@pytest.mark.parametrize("payers", ["same payer", "two payers"])
async def test_one_batch_transaction_pays_two_challenges(
    make_rig: MakeRig, devchain: Devchain, batch_settle: str, payers: str
) -> None:
    """The facilitator settles both authorizations in one transaction and answers
    Settled(batch tx) to both requests: both become DELIVERED with their own grant; one owns
    the txHash claim, the other is PAID on its own AuthorizationUsed without it; an audit
    matches each transfer to its own challenge."""
    rig = await make_rig(settler=ScriptedSettler())
    facilitator = Batching(devchain, rig.relayer, batch_settle)
    rig.settler.then(facilitator, facilitator)
    paid = await two_payments(rig, devchain, payers)
    first_block = devchain.rpc.block_number() + 1

    answers = await asyncio.gather(*(outcome(rig.pay(payment)) for _, payment in paid))

    grants = [granted(answer) for answer in answers]
    assert [g["challengeId"] for g in grants] == [challenge_id for challenge_id, _ in paid]
    assert {g["txHash"] for g in grants} == {facilitator.tx_hash}
    assert grants[0]["accessToken"] != grants[1]["accessToken"]
    records = [await rig.record(challenge_id) for challenge_id, _ in paid]
    assert all(r.state is State.DELIVERED for r in records)
    assert facilitator.tx_hash is not None
    owner = await rig.store.inner.get_by_tx_hash(facilitator.tx_hash)
    assert owner is not None
    (sharer,) = [r for r in records if r.challenge_id != owner.challenge_id]
    assert shared_with(sharer) == owner.challenge_id
    assert shared_with(owner) is None

    report = await audit(rig.pipeline, from_block=first_block, to_block=None)

    assert sorted(challenge_id for _, challenge_id in report.matched) == sorted(
        challenge_id for challenge_id, _ in paid
    )
    assert report.clean, (report.unmatched, report.missing_on_chain)


async def test_a_batch_hint_resolves_each_challenge_by_its_own_authorization(
    make_rig: MakeRig, devchain: Devchain, batch_settle: str
) -> None:
    """Both requests time out after the batch was broadcast and cannot read the chain, so both
    records stay SETTLING with the batch tx as their hint. Resolution reads the hint's
    receipt, finds each record's own AuthorizationUsed in it and marks each PAID, the
    second one sharing the txHash; no log search or state read was needed."""
    rig = await make_rig(settler=ScriptedSettler(), chain=False)
    facilitator = Batching(devchain, rig.relayer, batch_settle, answer=unknown_after)
    rig.settler.then(facilitator, facilitator)
    paid = await two_payments(rig, devchain, "two payers")

    answers = await asyncio.gather(*(outcome(rig.pay(payment)) for _, payment in paid))

    for answer in answers:
        problem(answer, 502, "SETTLEMENT_PENDING")
    reconciler = rig.competitor()
    resolved = []
    for challenge_id, _ in paid:
        record = await rig.record(challenge_id)
        assert record.state is State.SETTLING and record.payment is not None
        assert record.payment.broadcast_tx_hash == facilitator.tx_hash
        reads = len(rig.rpc.methods)
        resolved.append(await reconciler.resolve(record))
        assert set(rig.rpc.methods[reads:]) == {"eth_getTransactionReceipt"}
    assert [r.state for r in resolved] == [State.PAID, State.PAID]
    assert {r.tx_hash for r in resolved} == {facilitator.tx_hash}
    assert shared_with(resolved[0]) is None
    assert shared_with(resolved[1]) == resolved[0].challenge_id


async def test_a_hint_that_did_not_use_this_nonce_is_not_this_records_transfer(
    make_rig: MakeRig, devchain: Devchain, buyer: LocalAccount
) -> None:
    """A confused facilitator reports a transaction that moved exactly this amount from this
    payer to this seller, but with ANOTHER of the payer's authorizations. It holds a matching
    Transfer and no AuthorizationUsed for this record's nonce, so it is not this record's
    transfer: the record stays SETTLING and unresolved until its own authorization is used,
    and then it is PAID with that transaction."""
    rig = await make_rig(settler=ScriptedSettler())
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    lookalike = rig.settle_on_chain(rig.sign(buyer, challenge["accepts"][0]))
    rig.settler.then(Unknown("facilitator timed out", lookalike))

    answer = await outcome(rig.pay(payment))

    problem(answer, 502, "SETTLEMENT_PENDING")
    record = await rig.record(challenge["challengeId"])
    assert record.state is State.SETTLING and record.payment is not None
    assert record.payment.broadcast_tx_hash == lookalike
    assert record.tx_hash is None
    rig.clock.advance(rig.config.reconciler.grace_seconds + 1)
    report = await Reconciler(rig.pipeline, rig.config.reconciler).run_once()
    assert report.unresolved == [challenge["challengeId"]]
    assert await rig.store.inner.get_by_tx_hash(lookalike) is None

    real = rig.settle_on_chain(payment)
    grant = granted(await outcome(rig.pay(payment)))

    assert grant["txHash"] == real != lookalike
