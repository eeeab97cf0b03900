"""Who is asking, and whether they bought the challenge they ask about (SPEC 4.2).

A grant is a bearer credential, so it goes only to a caller with proof of the
purchase: the ``requestId`` in the body (the buyer's idempotency secret), or a
payment whose signature verifies and whose authorization is byte for byte the
one stored on the challenge. Not a ``challengeId``, not ``(from, nonce)``, not
any other signature: those are public (the whole authorization is in the
settlement's calldata) or shared with third parties.

Proving needs no chain call, and a payment that does not verify fails with the
402 a fresh, invalid payment gets. The window of validity is no part of the
proof (a paid buyer may come back after ``validBefore``); it is checked when a
payment is about to be settled (``Verifier.checked``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .eip712 import Eip3009Domain
from .errors import TxAlreadyRedeemed
from .interfaces import Authorization, Clock
from .networks import NetworkInfo
from .offers import OfferBuilder
from .protocol import AccessBody, PaymentPayload, check_payment
from .records import ChallengeRecord, PaymentDetails, PaymentKey

__all__ = ["Caller", "Verifier"]


@dataclass(slots=True)
class Caller:
    """One request: its body, its payment if any, and what was verified of it so far."""

    body: AccessBody
    payment: PaymentPayload | None = None
    key: PaymentKey | None = None
    #: The payment passed step 5 against this challenge (its window included).
    checked: tuple[str, Authorization] | None = None
    #: Its signature verified against this challenge (window aside: a proof, not a payment).
    verified: tuple[str, Authorization] | None = None


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


class Verifier:
    """Step 5 and the proof of purchase, against the requirement a challenge was offered."""

    def __init__(self, offers: OfferBuilder, network: NetworkInfo, clock: Clock) -> None:
        self.offers = offers
        self.network = network
        # The domain comes from config, never from a payload (SPEC 2.1).
        self.domain = Eip3009Domain(
            name=network.asset_name,
            version=network.asset_version,
            chain_id=network.chain_id,
            verifying_contract=network.asset,
        )
        self.clock = clock

    def checked(self, record: ChallengeRecord, caller: Caller) -> Authorization:
        """Step 5: the caller's payment against this challenge's requirement, window included."""
        assert caller.payment is not None
        if caller.checked is None or caller.checked[0] != record.challenge_id:
            offered = self.offers.offered_requirement(record)
            auth = check_payment(caller.payment, offered, self.network, self.domain, self.clock())
            caller.checked = caller.verified = (record.challenge_id, auth)
        return caller.checked[1]

    def proves(self, record: ChallengeRecord, caller: Caller) -> bool:
        """Whether the caller bought this challenge; raises 402 for a payment that fails."""
        if caller.body.request_id is not None and caller.body.request_id == record.request_id:
            return True
        stored = record.payment
        if caller.payment is None or stored is None:
            return False
        if caller.verified is None or caller.verified[0] != record.challenge_id:
            offered = self.offers.offered_requirement(record)
            auth = check_payment(
                caller.payment, offered, self.network, self.domain, self.clock(), window=False
            )
            caller.verified = (record.challenge_id, auth)
        return same_authorization(caller.verified[1], stored)

    def prove(self, record: ChallengeRecord, caller: Caller) -> None:
        """Raise unless the caller bought this challenge: nobody gets someone else's grant."""
        if not self.proves(record, caller):
            raise TxAlreadyRedeemed("this challenge is already paid, with another payment")
