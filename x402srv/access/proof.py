"""Who is asking, and whether they bought the challenge they ask about.

The rules: docs/protocol/proof.md.

A grant is a bearer credential, so it goes only to a caller with proof of the
purchase (docs/design.md, "Who gets a grant"): the ``requestId`` in the body
(the buyer's idempotency secret), or a payment that carries that same
``requestId`` in ``accepted.extra`` (where every 402 offered it), whose
signature verifies and whose authorization is byte for byte the one stored on
the challenge (a PENDING one has none of its purchase's: one it holds was given
back, and there the requestId is the proof). Not a ``challengeId``, not
``(from, nonce)``, not the buyer's own header rebuilt from the settlement's
calldata: the whole authorization and its signature are public once mined, and
the challengeId reaches whoever a challenge's 402 reaches. The requestId is never
on-chain and never sent to a facilitator (``protocol.for_third_parties``).

Proving needs no chain call. A payment that does not verify fails with the 402
a fresh, invalid payment gets; one that verifies but does not prove gets 409
TX_ALREADY_REDEEMED, as any payment that is already claimed: the answer never
depends on how close a guess came. A challenge may offer several networks and
tokens: a payment is checked against the offer it claims (``accepted.network``
and ``accepted.asset``), with that token's amount and EIP-712 domain; once a
payment is claimed, only the offer it chose (``payment_check``). The window of
validity is no part of the proof (a paid buyer may come back after
``validBefore``); it is checked when a payment is about to be settled
(``PaymentCheck.check``).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from x402srv.access.payment_check import PaymentCheck
from x402srv.access.progress import Caller
from x402srv.access.records import ChallengeRecord, PaymentDetails, PaymentKey, State
from x402srv.errors import TxAlreadyRedeemed
from x402srv.interfaces import Authorization

__all__ = ["PurchaseProof", "replays"]


def replays(record: ChallengeRecord, key: PaymentKey) -> bool:
    """Whether ``key`` is the authorization stored on the record (a replay, or a copy of it)."""
    stored = record.payment
    return (
        stored is not None
        and stored.payer.lower() == key.payer.lower()
        and stored.nonce.lower() == key.nonce.lower()
    )


def same_secret(offered: str | None, stored: str) -> bool:
    """``offered == stored`` in a time that does not tell how much of it matched."""
    return offered is not None and hmac.compare_digest(offered.encode(), stored.encode())


def same_authorization(auth: Authorization, stored: PaymentDetails) -> bool:
    """Byte for byte the authorization stored on the challenge."""
    return (
        auth.payer.lower() == stored.payer.lower()
        and str(auth.value) == stored.value
        and auth.valid_after == stored.valid_after
        and auth.valid_before == stored.valid_before
        and auth.nonce.lower() == stored.nonce.lower()
        and auth.signature.lower() == stored.signature.lower()
    )


@dataclass(frozen=True, slots=True)
class PurchaseProof:
    """Whether a caller bought the challenge it asks about: nobody gets someone else's grant."""

    payments: PaymentCheck

    def proves(self, record: ChallengeRecord, caller: Caller) -> bool:
        """Whether the caller bought this challenge; raises 402 for a payment that fails.

        The signature is checked first, whatever the requestId: a made-up one is
        402 and a real one (the buyer's, copied from the chain) 409, with or
        without a guess at the requestId.
        """
        if same_secret(caller.body.request_id, record.request_id):
            return True
        if not self.knows_request_id(record, caller):
            return False
        assert caller.payment is not None  # (a requestId not in the body is the payment's)
        verified = self.payments.verify(record, caller.payment)  # (as checked: kept on it)
        # A PENDING record has no payment of its purchase to compare (one it holds
        # was given back by a settler and may be replaced): the requestId is the proof.
        stored = record.payment
        return (
            record.state is State.PENDING
            or stored is None
            or same_authorization(verified.authorization, stored)
        )

    def knows_request_id(self, record: ChallengeRecord, caller: Caller) -> bool:
        """Whether the caller holds the purchase's ``requestId`` (body, or a verified payment).

        Less than proof where a payment is stored (SETTLING: the buyer's fresh
        authorization is not the stored one), but only the buyer holds it: such a
        caller may have the chain read to decide a stale attempt; anyone else may not.
        """
        if same_secret(caller.body.request_id, record.request_id):
            return True
        if caller.payment is None:
            return False
        verified = self.payments.verify(record, caller.payment)
        return same_secret(verified.payload.request_id, record.request_id)

    def prove(self, record: ChallengeRecord, caller: Caller) -> None:
        """Raise unless the caller bought this challenge: nobody gets someone else's grant."""
        if not self.proves(record, caller):
            raise TxAlreadyRedeemed("this challenge is already paid, with another payment")
