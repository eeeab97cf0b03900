"""How far a request has come, typed: what one step of the pipeline hands the next.

    Caller          the request: its body and, when it pays, its ``SentPayment``
    SentPayment     a decoded ``PAYMENT-SIGNATURE`` and the key it claims; it keeps
                    what step 5 (``payment_check``) found of it, per challenge
    CheckedPayment  a payment that passed step 5 against one challenge: the
                    authorization, and the challenge's offer it pays (network,
                    token, amount) with that offer's network and token
    Claimed         a challenge this request moved to SETTLING with its payment
                    claimed (steps 6-7): what step 8 settles
    Next            what a step gives: the answer, or the record as it is now to
                    look at again (``AccessPipeline._answer``)

A step that needs a payment takes a ``SentPayment``; one that settles takes a
``Claimed``: no step asks whether an earlier one ran.
"""

from __future__ import annotations

from dataclasses import dataclass

from x402srv.access.records import ChallengeRecord, Offer, PaymentKey
from x402srv.interfaces import Authorization
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.offers import AccessGranted, PaymentOffer
from x402srv.wire.protocol import AccessBody, PaymentPayload

__all__ = ["AccessResult", "Caller", "CheckedPayment", "Claimed", "Next", "SentPayment"]

#: What the pipeline answers: a 402 offer or a grant (every other answer is raised).
AccessResult = PaymentOffer | AccessGranted
#: What a step gives: the answer, or the record as it is now, to look at again.
Next = AccessResult | ChallengeRecord


@dataclass(frozen=True, slots=True)
class CheckedPayment:
    """A payment checked against one challenge's requirement (step 5)."""

    challenge_id: str
    payload: PaymentPayload
    key: PaymentKey
    authorization: Authorization
    #: The challenge's offer it pays (network, token, amount).
    offer: Offer
    #: That offer's network and token.
    option: NetworkInfo


@dataclass(slots=True)
class SentPayment:
    """The payment a caller sent, and what was found of it so far (per challenge)."""

    payload: PaymentPayload
    #: ``(chainId, asset, from, nonce)``: what a claim is keyed by.
    key: PaymentKey
    #: It passed step 5 against this challenge, its window of validity included.
    checked: CheckedPayment | None = None
    #: Its signature verified against this challenge (window aside: a proof, not a payment).
    verified: CheckedPayment | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    """One request: its body, and its payment if it sent one."""

    body: AccessBody
    payment: SentPayment | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A challenge this request moved PENDING -> SETTLING with its payment claimed."""

    record: ChallengeRecord
    payment: CheckedPayment
