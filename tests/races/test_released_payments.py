"""A payment a settler gave back stays its purchase's: whoever copies it buys nothing with it.

A settler that refuses a payment has seen it whole: the authorization, its
signature and the requirement, our ids removed (``protocol.for_third_parties``).
A facilitator may log that; so may the RPC node a transfer was simulated on.
When no settler could take it (503 SETTLER_UNAVAILABLE) the payment is still
good, and x402srv tells its buyer to send the same request again. Such a copy
once bought a grant for whoever sent it first, on a purchase of its own or on
the buyer's (its challengeId is in the logs), with the buyer's money; the
buyer's own retry then got 409. Now the challenge keeps the payment's claim,
and the payment is taken again only with proof of the purchase
(docs/protocol/proof.md). The settler is scripted (a facilitator cannot be
made to fail on cue); what the copier sends is exactly what it was handed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, Payment, Rig, granted, outcome, problem
from tests.support.scripted import OnChain, ScriptedSettler
from x402srv.access.pipeline import AccessResult
from x402srv.access.reconciler import Reconciler
from x402srv.cli.audit import audit
from x402srv.errors import ProblemError
from x402srv.interfaces import Rejected, Unknown
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import AccessBody

#: No settler of the network could take the payment: it is fine, send it again later.
UNAVAILABLE = Rejected("unexpected_verify_error", "The facilitator timed out.", settler_failed=True)


@dataclass
class Refused:
    """A buyer's payment that a settler saw and gave back, and what that settler was handed."""

    rig: Rig
    buyer_payment: Payment
    request_id: str
    challenge_id: str
    #: The payload as the settler saw it: what a facilitator's log holds.
    seen: Payment


async def refused(make_rig: MakeRig, buyer: LocalAccount, *, discovery: bool) -> Refused:
    """A challenge-first (or discovery-first) purchase whose payment no settler could take."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))  # the buyer's retry settles
    offer = await rig.pipeline.access(
        AccessBody(None if discovery else "hourly", None, "default"), None
    )
    assert isinstance(offer, PaymentOffer)
    payment = rig.sign(buyer, offer.body["accepts"][0])
    answer = await outcome(rig.pay(payment, plan_id=None if discovery else "hourly"))
    problem(answer, 503, "SETTLER_UNAVAILABLE")
    [request] = rig.settler.requests
    record = await rig.store.inner.get_by_request_id(payment.payload.request_id or "")
    assert record is not None
    seen = Payment.of(dict(request.payload))
    return Refused(rig, payment, record.request_id, record.challenge_id, seen)


def copier_on_its_own(refused: Refused) -> Awaitable[AccessResult]:
    """The copy sent as it was seen: a discovery-first purchase of the copier's."""
    return refused.rig.pipeline.access(AccessBody(None, None, "default"), refused.seen.payload)


async def copier_on_a_challenge_of_its_own(refused: Refused) -> AccessResult:
    rig = refused.rig
    own = await rig.challenge()
    return await rig.pay(refused.seen, challenge_id=own["challengeId"])


def copier_naming_the_buyers_challenge(refused: Refused) -> Awaitable[AccessResult]:
    """The challengeId is in the seller's logs."""
    return refused.rig.pay(refused.seen, challenge_id=refused.challenge_id)


COPIERS: dict[str, Callable[[Refused], Awaitable[AccessResult]]] = {
    "as seen": copier_on_its_own,
    "on a challenge of its own": copier_on_a_challenge_of_its_own,
    "naming the buyer's challenge": copier_naming_the_buyers_challenge,
}


@pytest.mark.parametrize("discovery", [False, True], ids=["challenge-first", "discovery-first"])
@pytest.mark.parametrize("copier", list(COPIERS))
async def test_advisory_a_payment_its_settler_gave_back_buys_nothing_for_a_copier(
    make_rig: MakeRig, buyer: LocalAccount, discovery: bool, copier: str
) -> None:
    """The copy is 409 TX_ALREADY_REDEEMED, never settled; the buyer's retry gets its grant."""
    case = await refused(make_rig, buyer, discovery=discovery)
    rig = case.rig

    answer = await outcome(COPIERS[copier](case))

    error = problem(answer, 409, "TX_ALREADY_REDEEMED")
    assert case.request_id not in str(error.to_problem())
    assert len(rig.settler.requests) == 1, "the copy was handed to a settler"
    buyer_payment = case.buyer_payment
    assert not rig.devchain.authorization_state(buyer.address, buyer_payment.nonce)

    retry = await outcome(rig.pay(buyer_payment, plan_id=None if discovery else "hourly"))

    grant = granted(retry)
    assert (grant["challengeId"], grant["requestId"]) == (case.challenge_id, case.request_id)


async def test_a_payment_given_back_is_taken_again_on_its_request_id(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The buyer that sends the copy as seen, with its requestId in the body, is its buyer."""
    case = await refused(make_rig, buyer, discovery=False)
    body = AccessBody("hourly", case.request_id, "default")

    answer = await outcome(case.rig.pipeline.access(body, case.seen.payload))

    assert granted(answer)["challengeId"] == case.challenge_id


async def test_a_challenge_whose_payment_was_given_back_takes_a_new_one(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A new authorization of the buyer's for the same challenge settles as a first one does."""
    case = await refused(make_rig, buyer, discovery=False)
    rig = case.rig
    body = AccessBody("hourly", case.request_id, "default")
    challenge = await rig.pipeline.access(body, None)
    assert isinstance(challenge, PaymentOffer)
    fresh = rig.sign(buyer, challenge.body["accepts"][0])

    answer: AccessResult | ProblemError = await outcome(rig.pay(fresh))

    assert granted(answer)["challengeId"] == case.challenge_id


async def test_a_buyer_whose_payment_carries_no_request_id_is_told_to_sign_a_new_one(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A discovery-first payment without ``accepted.extra.requestId``: its purchase's requestId
    was made here and never reached the buyer, so it cannot prove it is the buyer after a 503.
    Regression: the 409 told it only to send the payment again with that requestId; it now
    also says what works, a new payment (which settles as a first one does)."""
    rig = await make_rig(settler=ScriptedSettler(UNAVAILABLE))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    offer = await rig.pipeline.access(AccessBody(None, None, "default"), None)
    assert isinstance(offer, PaymentOffer)
    accepted = offer.body["accepts"][0]
    accepted["extra"].pop("requestId")
    payment = rig.sign(buyer, accepted)
    problem(await outcome(rig.pay(payment, plan_id=None)), 503, "SETTLER_UNAVAILABLE")

    again = problem(await outcome(rig.pay(payment, plan_id=None)), 409, "TX_ALREADY_REDEEMED")

    assert "sign a new payment" in str(again.to_problem()["detail"])
    fresh = rig.sign(buyer, accepted)
    assert granted(await outcome(rig.pay(fresh, plan_id=None)))["type"] == "AccessGrant"


async def test_audit_sends_a_transfer_its_settling_challenge_holds_to_reconcile(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The other side: a transfer the chain shows for a SETTLING challenge's own payment (its
    settler timed out) is the reconciler's to finish, and after a pass the audit is clean."""
    rig = await make_rig(settler=ScriptedSettler(Unknown("timed out")))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
    first_block = rig.devchain.rpc.block_number() + 1
    rig.settle_on_chain(payment)

    report = await audit(rig.pipeline, from_block=first_block, to_block=None)

    [(_, why)] = report.unmatched
    assert why == (
        f"its authorization is claimed by challenge {challenge['challengeId']} (SETTLING); "
        "run x402srv reconcile"
    )
    rig.clock.advance(1)  # the pass takes records updated before its start
    await Reconciler(rig.pipeline, rig.config.reconciler).run_once()
    assert (await audit(rig.pipeline, from_block=first_block, to_block=None)).clean
