"""A grant is a bearer credential: only proof fetches it (docs/protocol/proof.md), in every state.

Proof is the requestId, or a payment that echoes it in ``accepted.extra``,
whose signature verifies and whose authorization is byte for byte the one
stored on the challenge. Each check
runs against a purchase left DELIVERED, PAID (the issuer failed once) or
SETTLING (the facilitator timed out, then its transfer landed on anvil). An
unproven caller gets what a fresh payment like its own would get, never the
grant; an invalid payment causes no chain call and no change to the record (the
RPC requests of the pipeline's chain reader are logged to prove it), while a
valid payment of the buyer's own (its requestId echoed) may have the chain decide
a SETTLING record; one of anybody else's makes no chain call either.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, Payment, Rig, granted, outcome, problem
from tests.support.scripted import CountingIssuer, OnChain, ScriptedSettler
from x402srv.access.records import State
from x402srv.devchain import Devchain
from x402srv.errors import ProblemError
from x402srv.interfaces import Unknown
from x402srv.wire.offers import PaymentOffer

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


@dataclass
class Purchase:
    rig: Rig
    challenge: dict[str, Any]
    payment: Payment
    buyer: LocalAccount

    @property
    def accepted(self) -> dict[str, Any]:
        return dict(self.challenge["accepts"][0])


async def left_in(state: State, make_rig: MakeRig, buyer: LocalAccount) -> Purchase:
    """A purchase whose authorization is used on-chain and whose record is in ``state``."""
    if state is State.SETTLING:
        rig = await make_rig(settler=ScriptedSettler(Unknown("facilitator timed out")))
    else:
        fail = 1 if state is State.PAID else 0
        rig = await make_rig(
            settler=ScriptedSettler(), issuer=lambda c: CountingIssuer(c, fail=fail)
        )
        rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    await outcome(rig.pay(payment))
    if state is State.SETTLING:
        rig.settle_on_chain(payment)  # the facilitator's transfer lands after its timeout
    assert (await rig.record(challenge["challengeId"])).state is state
    assert rig.devchain.authorization_state(buyer.address, payment.nonce)
    return Purchase(rig, challenge, payment, buyer)


@pytest.fixture(params=[State.DELIVERED, State.PAID, State.SETTLING], ids=str.lower)
async def purchase(
    request: pytest.FixtureRequest, make_rig: MakeRig, buyer: LocalAccount
) -> Purchase:
    return await left_in(request.param, make_rig, buyer)


def _with_signature(payment: Payment, signature: str) -> Payment:
    wire = copy.deepcopy(payment.wire)
    wire["payload"]["signature"] = signature
    wire["accepted"]["extra"].pop("requestId")  # the attacker never saw it
    return Payment.of(wire)


def forged(purchase: Purchase, devchain: Devchain) -> Payment:
    """The public authorization (from, nonce, value ... are on-chain) with made-up bytes."""
    return _with_signature(purchase.payment, "0x" + "11" * 65)


def malleated(purchase: Purchase, devchain: Devchain) -> Payment:
    """The stored signature's high-s twin: (r, n - s, flipped v) recovers the same signer."""
    raw = bytes.fromhex(purchase.payment.signature[2:])
    r, s, v = raw[:32], int.from_bytes(raw[32:64], "big"), raw[64]
    twin = r + (SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - v])
    return _with_signature(purchase.payment, "0x" + twin.hex())


def another_authorization(purchase: Purchase, devchain: Devchain) -> Payment:
    """A valid authorization by the same payer for the same requirement, new nonce."""
    return purchase.rig.sign(purchase.buyer, purchase.accepted)


def challenge_id_alone(purchase: Purchase, devchain: Devchain) -> Payment:
    """Someone who knows only the challengeId pays it with a valid authorization of their own."""
    accepted = purchase.accepted
    accepted["extra"] = {k: v for k, v in accepted["extra"].items() if k != "requestId"}
    return purchase.rig.sign(devchain.new_account(), accepted)


def rebuilt(purchase: Purchase, devchain: Devchain) -> Payment:
    """The buyer's exact header rebuilt from the mined calldata, challengeId included (it
    reaches whoever saw the 402): everything but the requestId, which is never on-chain."""
    wire = copy.deepcopy(purchase.payment.wire)
    wire["accepted"]["extra"].pop("requestId")
    return Payment.of(wire)


def rebuilt_with_a_guess(purchase: Purchase, devchain: Devchain) -> Payment:
    """The same, with a made-up requestId in its place."""
    wire = copy.deepcopy(purchase.payment.wire)
    wire["accepted"]["extra"]["requestId"] = str(uuid.uuid4())
    return Payment.of(wire)


#: Each attack, and what a fresh payment like it gets: (status, code) for a record that is
#: SETTLING, and for one that is paid (PAID, DELIVERED).
ATTACKS = {
    "forged signature": (forged, (402, "PAYMENT_FAILED"), (402, "PAYMENT_FAILED")),
    "malleated signature": (malleated, (402, "PAYMENT_FAILED"), (402, "PAYMENT_FAILED")),
    "another authorization": (
        another_authorization,
        (409, "SETTLEMENT_IN_PROGRESS"),
        (409, "TX_ALREADY_REDEEMED"),
    ),
    "challengeId alone": (
        challenge_id_alone,
        (502, "SETTLEMENT_PENDING"),
        (409, "TX_ALREADY_REDEEMED"),
    ),
    "rebuilt from the calldata": (
        rebuilt,
        (409, "TX_ALREADY_REDEEMED"),
        (409, "TX_ALREADY_REDEEMED"),
    ),
    "rebuilt with a guessed requestId": (
        rebuilt_with_a_guess,
        (409, "TX_ALREADY_REDEEMED"),
        (409, "TX_ALREADY_REDEEMED"),
    ),
}


async def test_the_request_id_is_proof(purchase: Purchase) -> None:
    """The buyer's retry with its requestId (no header) gets the grant."""
    rig = purchase.rig
    answer = await outcome(rig.pay(None, request_id=purchase.challenge["requestId"]))

    grant = granted(answer)
    assert grant["requestId"] == purchase.challenge["requestId"]
    record = await rig.record(purchase.challenge["challengeId"])
    assert record.state is State.DELIVERED and record.grant == grant


async def test_the_exact_stored_authorization_is_proof(purchase: Purchase) -> None:
    """The very header that paid (no requestId in the body) gets the grant."""
    rig = purchase.rig
    grant = granted(await outcome(rig.pay(purchase.payment)))

    assert grant["challengeId"] == purchase.challenge["challengeId"]
    assert (await rig.record(grant["challengeId"])).grant == grant


#: The buyer's fresh authorization (its requestId echoed, another nonce): valid for the
#: challenge on its own, and from the one caller that holds the requestId, so on a SETTLING
#: record it may have the chain decide the stale attempt (the buyer gets its challenge
#: unstuck that way), but whatever the chain decides, no grant comes of it. A payment of
#: someone who knows only the challengeId makes no chain read
#: (``test_a_challenge_id_and_a_payment_of_one_s_own_make_no_chain_read``).
MAY_ASK_THE_CHAIN = {"another authorization"}


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_unproven_callers_get_no_grant(
    purchase: Purchase, devchain: Devchain, attack: str
) -> None:
    """Forged or malleated signatures, another valid authorization, or a challengeId alone:
    the answer a fresh payment like it gets, never the grant, nothing settled. An invalid
    payment causes no RPC request and no change at all."""
    rig = purchase.rig
    make, if_settling, if_paid = ATTACKS[attack]
    payment = make(purchase, devchain)
    before = await rig.record(purchase.challenge["challengeId"])
    rpc_calls, settler_calls = len(rig.rpc.methods), len(rig.settler.requests)

    answer = await outcome(rig.pay(payment))

    asks_chain = before.state is State.SETTLING and attack in MAY_ASK_THE_CHAIN
    status, code = if_settling if before.state is State.SETTLING else if_paid
    if asks_chain:
        error = answer if isinstance(answer, ProblemError) else None
        assert error is not None, answer
        assert (error.status, error.code) in {(status, code), (409, "TX_ALREADY_REDEEMED")}
    else:
        error = problem(answer, status, code)
        assert len(rig.rpc.methods) == rpc_calls, rig.rpc.methods[rpc_calls:]
        assert await rig.record(before.challenge_id) == before
    if status == 402:
        assert error.extra["reason"] == "invalid_exact_evm_payload_signature"
    assert "accessToken" not in str(error.to_problem())
    assert len(rig.settler.requests) == settler_calls
    after = await rig.record(before.challenge_id)
    assert after.payment is not None
    assert before.payment is not None
    assert after.payment.nonce == before.payment.nonce, "the buyer's authorization stays stored"
    assert await rig.store.inner.get_by_payment(rig.key(payment)) in (None, before, after)


async def test_the_exact_stored_authorization_is_proof_after_its_valid_before(
    purchase: Purchase,
) -> None:
    """Proof is the signature and the authorization, not its validity window: the buyer whose
    settlement was pending retries with the same header after validBefore and gets the grant
    (docs/protocol/states.md: a 502 SETTLEMENT_PENDING is retried for the grant)."""
    rig = purchase.rig
    valid_before = int(purchase.payment.authorization["validBefore"])
    rig.clock.advance(valid_before - rig.clock() + 1)

    grant = granted(await outcome(rig.pay(purchase.payment)))

    assert grant["challengeId"] == purchase.challenge["challengeId"]


async def test_a_challenge_id_and_a_payment_of_one_s_own_make_no_chain_read(
    make_rig: MakeRig, buyer: LocalAccount, devchain: Devchain
) -> None:
    """Regression: a valid authorization of one's own naming a stuck SETTLING challenge (its
    challengeId reaches logs and tokens) made the server read the chain, once per request,
    as often as anyone liked: paying callers are not counted by the unpaid-request limit.
    Now only a caller holding the purchase's requestId does; the others are told to come
    back, as the buyer is, and the buyer's own retry still decides the record."""
    purchase = await left_in(State.SETTLING, make_rig, buyer)
    rig = purchase.rig
    before = await rig.record(purchase.challenge["challengeId"])
    reads = len(rig.rpc.methods)

    for _ in range(5):
        problem(
            await outcome(rig.pay(challenge_id_alone(purchase, devchain))),
            502,
            "SETTLEMENT_PENDING",
        )

    assert len(rig.rpc.methods) == reads, rig.rpc.methods[reads:]
    assert await rig.record(before.challenge_id) == before
    grant = granted(await outcome(rig.pay(purchase.payment)))
    assert grant["challengeId"] == before.challenge_id


async def test_a_discovery_first_buyer_s_own_header_gets_its_stuck_purchase_s_grant(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The gateway and MCP buy discovery-first: no body, only the header, whose
    ``accepted.extra.requestId`` came with the 402. Left SETTLING (the facilitator timed
    out, its transfer landed), the header rebuilt from the calldata makes no chain read
    and changes nothing; a fresh authorization of the buyer's has the chain decide (no
    grant: it is not the stored one), and the buyer's own header gets the grant."""
    rig = await make_rig(settler=ScriptedSettler(Unknown("facilitator timed out")))
    discovery = await rig.pay(None, plan_id=None)
    assert isinstance(discovery, PaymentOffer)
    payment = rig.sign(buyer, discovery.body["accepts"][0])
    problem(await outcome(rig.pay(payment, plan_id=None)), 502, "SETTLEMENT_PENDING")
    rig.settle_on_chain(payment)
    request_id = discovery.body["accepts"][0]["extra"]["requestId"]
    record = await rig.store.inner.get_by_request_id(request_id)
    assert record is not None and record.state is State.SETTLING and record.implicit
    reads = len(rig.rpc.methods)

    copy_of_it = Payment.of(
        {**payment.wire, "accepted": {**payment.wire["accepted"], "extra": {"planId": "hourly"}}}
    )
    problem(await outcome(rig.pay(copy_of_it, plan_id=None)), 409, "TX_ALREADY_REDEEMED")
    assert len(rig.rpc.methods) == reads, rig.rpc.methods[reads:]
    assert await rig.record(record.challenge_id) == record

    # A fresh authorization of the buyer's, echoing the requestId (a client that signs
    # again): the chain decides the stale attempt, but proof is the stored authorization.
    fresh = rig.sign(buyer, discovery.body["accepts"][0])
    problem(await outcome(rig.pay(fresh, plan_id=None)), 409, "TX_ALREADY_REDEEMED")
    assert (await rig.record(record.challenge_id)).state is State.PAID
    assert await rig.store.inner.get_by_payment(rig.key(fresh)) is None

    grant = granted(await outcome(rig.pay(payment, plan_id=None)))
    assert grant["challengeId"] == record.challenge_id
    assert grant["requestId"] == request_id
    assert (await rig.record(record.challenge_id)).state is State.DELIVERED
