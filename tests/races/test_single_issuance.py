"""An exclusive issuer is called once per challenge, however many requests deliver it at once.

The issuer is the real ``callback`` one; the seller's function counts its calls
and answers only when the test releases it, so every other request is known to
be waiting before the first one finishes. The PAID record comes from the
pipeline itself: the facilitator timed out, its transfer landed on anvil, and
resolution marked the record PAID without delivering it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from eth_account.signers.local import LocalAccount

from tests.support.racing import states
from tests.support.rig import MakeRig, Rig, granted, outcome, problem
from tests.support.scripted import GatedCallback, ScriptedSettler
from x402srv.access.pipeline import DELIVERY_LEASE_SECONDS
from x402srv.access.records import ChallengeRecord, RecordChanges, State
from x402srv.default_plugins.callback_issuer import CallbackIssuer
from x402srv.interfaces import TransitionApplied, TransitionRequest, Unknown
from x402srv.wire.offers import AccessGranted

CONCURRENT = 20


async def gated_rig(make_rig: MakeRig, seller: GatedCallback) -> Rig:
    return await make_rig(
        settler=ScriptedSettler(Unknown("facilitator timed out")),
        issuer=lambda clock: CallbackIssuer(seller, spec="gated", clock=clock, timeout_seconds=60),
    )


async def paid(rig: Rig, buyer: LocalAccount) -> ChallengeRecord:
    """A PAID record nobody is delivering yet."""
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
    rig.settle_on_chain(payment)
    record = await rig.pipeline.resolve(await rig.record(challenge["challengeId"]))
    assert record.state is State.PAID
    return record


async def crashed_holder_claims(rig: Rig, record: ChallengeRecord, lease_until: float) -> None:
    """A delivery claim as a holder writes it before calling the issuer, then dies."""
    assert record.payment is not None
    claim = replace(record.payment, attempt_id="crashed-holder", lease_until=lease_until)
    result = await rig.store.inner.transition(
        TransitionRequest(
            challenge_id=record.challenge_id,
            expect=State.PAID,
            to=State.PAID,
            at=rig.clock(),
            reason="issuing the credential",
            changes=RecordChanges(payment=claim),
            attempt_id=record.payment.attempt_id,
        )
    )
    assert isinstance(result, TransitionApplied)


async def test_concurrent_deliveries_call_the_exclusive_issuer_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """20 deliveries of one PAID record at once (retries with the requestId, and the
    reconciler's ``deliver``): the seller's function runs once, the 19 others wait for it,
    and all 20 answer with the same grant."""
    seller = GatedCallback()
    rig = await gated_rig(make_rig, seller)
    record = await paid(rig, buyer)
    rig.store.forget_calls()
    retries = [rig.pay(None, request_id=record.request_id) for _ in range(CONCURRENT - 5)]
    delivers = [rig.pipeline.deliver(record) for _ in range(5)]

    everyone = asyncio.gather(asyncio.gather(*retries), asyncio.gather(*delivers))
    await seller.entered.wait()
    await rig.store.called("get_challenge", CONCURRENT - 1, tasks=True)  # all others wait
    assert len(seller.calls) == 1
    seller.release.set()
    retried, delivered_records = await everyone

    assert all(isinstance(answer, AccessGranted) for answer in retried)
    grants: list[dict[str, Any] | None] = [
        answer.grant for answer in retried if isinstance(answer, AccessGranted)
    ]
    grants += [record.grant for record in delivered_records]
    assert len(grants) == CONCURRENT
    assert all(grant == grants[0] for grant in grants)
    assert grants[0] is not None and grants[0]["accessToken"] == "seller-token-1"
    assert len(seller.calls) == 1
    delivered = await rig.record(record.challenge_id)
    assert delivered.grant == grants[0]
    assert states(delivered).count(State.DELIVERED) == 1


async def test_a_crashed_holders_lapsed_claim_lets_the_next_request_issue_at_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The holder of the delivery claim died before issuing; its claim has lapsed. The
    buyer's next retry takes the claim and issues at once, without waiting for anyone."""
    seller = GatedCallback(released=True)
    rig = await gated_rig(make_rig, seller)
    record = await paid(rig, buyer)
    await crashed_holder_claims(rig, record, lease_until=rig.clock() - 1)
    rig.store.forget_calls()

    grant = granted(await outcome(rig.pay(None, request_id=record.request_id)))

    assert rig.store.calls["get_challenge"] == 0  # it never waited
    assert len(seller.calls) == 1
    assert grant["accessToken"] == "seller-token-1"
    assert (await rig.record(record.challenge_id)).state is State.DELIVERED


async def test_a_claim_that_lapses_while_a_request_waits_is_taken_over(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The holder died just after claiming: the buyer's retry waits for it, and issues the
    credential itself as soon as the claim's lease has run out (the clock moves, not time)."""
    seller = GatedCallback(released=True)
    rig = await gated_rig(make_rig, seller)
    record = await paid(rig, buyer)
    await crashed_holder_claims(rig, record, lease_until=rig.clock() + DELIVERY_LEASE_SECONDS)
    rig.store.forget_calls()

    retry = asyncio.create_task(outcome(rig.pay(None, request_id=record.request_id)))
    await rig.store.called("get_challenge")  # it is waiting for the holder
    assert not retry.done() and seller.calls == []
    rig.clock.advance(DELIVERY_LEASE_SECONDS)
    grant = granted(await retry)

    assert len(seller.calls) == 1
    assert grant["accessToken"] == "seller-token-1"
    assert (await rig.record(record.challenge_id)).grant == grant
