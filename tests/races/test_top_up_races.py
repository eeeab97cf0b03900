"""A top-up delivered by many at once (the buyer's retries, workers, the reconciler): credited once.

In process, on the memory and sqlite stores: a grant of a plan that sells
calls is bought, then topped up; the top-up's transfer lands on anvil behind
the settler's back (it timed out), so resolution leaves it PAID with nobody
delivering it. Twenty deliveries then race for it: the grant gains the
plan's calls exactly once, the top-up ends DELIVERED with one receipt, and a
top-up bound to one grant can never be paid for another.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from typing import Any, cast

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, Payment, Rig, granted, outcome, problem
from tests.support.scripted import ScriptedSettler
from x402srv.access.records import ChallengeRecord, State
from x402srv.interfaces import CreditStore, Unknown
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import AccessBody, PaymentPayload, parse_payment_payload

CALLS_3 = {"plan_id": "calls-3", "unit_amount": "$0.01", "description": "Three", "calls": 3}
CONCURRENT = 20


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _paid_for(rig: Rig, buyer: LocalAccount, body: AccessBody) -> ChallengeRecord:
    """The challenge of ``body`` paid on-chain while its settler timed out: PAID, undelivered."""
    offer = await rig.pipeline.access(body, None)
    assert isinstance(offer, PaymentOffer)
    payment = rig.sign(buyer, offer.body["accepts"][0])
    answer = await outcome(rig.pipeline.access(body, payment.payload))
    problem(answer, 502, "SETTLEMENT_PENDING")
    rig.settle_on_chain(payment)
    record = await rig.pipeline.resolve(await rig.record(offer.body["challengeId"]))
    assert record.state is State.PAID
    return record


async def _grant(rig: Rig, buyer: LocalAccount) -> dict[str, Any]:
    body = AccessBody("calls-3", str(uuid.uuid4()), "default")
    record = await _paid_for(rig, buyer, body)
    delivered = await rig.pipeline.deliver(record)
    assert delivered.state is State.DELIVERED
    return granted(await rig.pipeline.access(body, None))


async def test_racing_deliveries_of_a_top_up_credit_it_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig = await make_rig(settler=ScriptedSettler(*[Unknown("timed out")] * 2), plans=[CALLS_3])
    grant = await _grant(rig, buyer)
    top_up = AccessBody(None, str(uuid.uuid4()), "default", top_up=grant["requestId"])
    record = await _paid_for(rig, buyer, top_up)
    assert record.top_up_of == grant["challengeId"]

    deliveries = [rig.competitor().deliver(record) for _ in range(CONCURRENT - 1)]
    after = await asyncio.gather(rig.pipeline.deliver(record), *deliveries)
    assert {each.state for each in after} == {State.DELIVERED}
    assert len({str(each.grant) for each in after}) == 1
    store = cast(CreditStore, rig.store.inner)
    account = await store.get_credits(grant["challengeId"])
    assert account is not None
    assert [(e.key, e.amount) for e in account.entries] == [
        (grant["challengeId"], 3),
        (record.challenge_id, 3),
    ]
    assert (account.balance, account.credited) == (6, 6)
    receipt = granted(await rig.pipeline.access(top_up, None))  # its requestId fetches it
    assert (receipt["type"], receipt["calls"], receipt["grantChallengeId"]) == (
        "TopUp",
        3,
        grant["challengeId"],
    )
    assert "accessToken" not in receipt


async def test_a_top_up_bound_to_one_grant_is_never_paid_for_another(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig = await make_rig(settler=ScriptedSettler(*[Unknown("timed out")] * 2), plans=[CALLS_3])
    first, second = await _grant(rig, buyer), await _grant(rig, buyer)
    request_id = str(uuid.uuid4())
    offer = await rig.pipeline.access(
        AccessBody(None, request_id, "default", top_up=first["requestId"]), None
    )
    assert isinstance(offer, PaymentOffer)
    payment = rig.sign(buyer, offer.body["accepts"][0])
    redirected = AccessBody(None, request_id, "default", top_up=second["requestId"])
    problem(
        await outcome(rig.pipeline.access(redirected, payment.payload)), 409, "REQUEST_ID_CONFLICT"
    )
    # the payment names its challenge (accepted.extra.challengeId), the body another grant
    by_challenge = AccessBody(None, None, "default", top_up=second["requestId"])
    named = _with_challenge(payment, offer.body["challengeId"])
    problem(await outcome(rig.pipeline.access(by_challenge, named)), 409, "REQUEST_ID_CONFLICT")
    store = cast(CreditStore, rig.store.inner)
    account = await store.get_credits(second["challengeId"])
    assert account is not None
    assert account.credited == 3  # its own purchase only
    assert len(rig.settler.requests) == 2  # the two purchases; nothing for the top-up


def _with_challenge(payment: Payment, challenge_id: str) -> PaymentPayload:
    wire = copy.deepcopy(payment.wire)
    wire["accepted"]["extra"]["challengeId"] = challenge_id
    return parse_payment_payload(wire)
