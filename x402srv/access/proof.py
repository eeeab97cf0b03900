"""Who is asking, and whether they bought the challenge they ask about.

The rules: docs/protocol/proof.md.

A grant is a bearer credential, so it goes only to a caller with proof of the
purchase (docs/design.md, "Who gets a grant"): the ``requestId`` in the body
(the buyer's idempotency secret), or a payment that carries that same
``requestId`` in ``accepted.extra`` (where every 402 offered it), whose
signature verifies and whose authorization is byte for byte the one stored on
the challenge. Not a ``challengeId``, not ``(from, nonce)``, not the buyer's
own header rebuilt from the settlement's calldata: the whole authorization and
its signature are public once mined, and the challengeId reaches whoever a
challenge's 402 reaches. The requestId is never on-chain and never sent to a
facilitator (``protocol.for_third_parties``).

Proving needs no chain call. A payment that does not verify fails with the 402
a fresh, invalid payment gets; one that verifies but does not prove gets 409
TX_ALREADY_REDEEMED, as any payment that is already claimed: the answer never
depends on how close a guess came. A challenge may offer several networks and
tokens: a payment is checked against the offer it claims (``accepted.network``
and ``accepted.asset``), with that token's amount and EIP-712 domain; once a
payment is claimed, only the offer it chose. The window of validity is no part of the
proof (a paid buyer may come back after ``validBefore``); it is checked when a
payment is about to be settled (``Verifier.checked``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from x402srv.access.records import ChallengeRecord, Offer, PaymentDetails, PaymentKey, State
from x402srv.errors import PaymentFailed, TxAlreadyRedeemed
from x402srv.interfaces import Authorization, Clock
from x402srv.wire.eip712 import Eip3009Domain
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.offers import OfferBuilder
from x402srv.wire.protocol import AccessBody, PaymentPayload, check_payment
from x402srv.wire.reasons import Reason

__all__ = ["Caller", "Verifier", "replays"]


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
    #: The challenge's offer it pays (network, token, amount), once checked.
    offer: Offer | None = None
    #: That offer's network and token.
    option: NetworkInfo | None = None


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


class Verifier:
    """Step 5 and the proof of purchase, against the requirement a challenge was offered."""

    def __init__(
        self,
        offers: OfferBuilder,
        options: Callable[[str, str], NetworkInfo | None],
        clock: Clock,
    ) -> None:
        self.offers = offers
        self.options = options
        self.clock = clock
        self._domains: dict[tuple[str, str], Eip3009Domain] = {}

    def _domain(self, option: NetworkInfo) -> Eip3009Domain:
        """The token's EIP-712 domain: config's, never a payload's (docs/protocol/config.md)."""
        key = (option.caip2, option.asset)
        domain = self._domains.get(key)
        if domain is None:
            domain = self._domains[key] = Eip3009Domain(
                name=option.asset_name,
                version=option.asset_version,
                chain_id=option.chain_id,
                verifying_contract=option.asset,
            )
        return domain

    def _claimed(
        self, record: ChallengeRecord, payment: PaymentPayload
    ) -> tuple[Offer, NetworkInfo, dict[str, Any]]:
        """The offer the payment claims: one of a PENDING challenge's, else the one it chose."""
        accepted = payment.accepted
        if record.state is State.PENDING:
            offers = record.offers
        else:
            offers = (Offer(record.network, record.asset, record.amount),)
        offer = next(
            (
                o
                for o in offers
                if o.network == accepted.network and o.asset.lower() == accepted.asset.lower()
            ),
            None,
        )
        if offer is None:
            if all(o.network != accepted.network for o in offers):
                networks = ", ".join(sorted({o.network for o in offers}))
                raise PaymentFailed(
                    Reason.INVALID_NETWORK, f"this challenge is paid on {networks} only"
                )
            raise PaymentFailed(
                Reason.INVALID_PAYMENT_REQUIREMENTS,
                f"accepted.asset is not a token this challenge accepts on {accepted.network}",
            )
        offered = self.offers.offered_requirement(record, offer)  # 410 if no longer offered
        option = self.options(offer.network, offer.asset)
        assert option is not None  # offered_requirement found it
        return offer, option, offered

    def checked(self, record: ChallengeRecord, caller: Caller) -> Authorization:
        """Step 5: the caller's payment against this challenge's requirement, window included."""
        assert caller.payment is not None
        if caller.checked is None or caller.checked[0] != record.challenge_id:
            offer, option, offered = self._claimed(record, caller.payment)
            auth = check_payment(
                caller.payment, offered, option, self._domain(option), self.clock()
            )
            caller.checked = caller.verified = (record.challenge_id, auth)
            caller.offer, caller.option = offer, option
        return caller.checked[1]

    def proves(self, record: ChallengeRecord, caller: Caller) -> bool:
        """Whether the caller bought this challenge; raises 402 for a payment that fails.

        The signature is checked first, whatever the requestId: a made-up one is
        402 and a real one (the buyer's, copied from the chain) 409, with or
        without a guess at the requestId.
        """
        if same_secret(caller.body.request_id, record.request_id):
            return True
        stored = record.payment
        if caller.payment is None or stored is None:
            return False
        if caller.verified is None or caller.verified[0] != record.challenge_id:
            _, option, offered = self._claimed(record, caller.payment)
            auth = check_payment(
                caller.payment,
                offered,
                option,
                self._domain(option),
                self.clock(),
                window=False,
            )
            caller.verified = (record.challenge_id, auth)
        return same_secret(caller.payment.request_id, record.request_id) and same_authorization(
            caller.verified[1], stored
        )

    def prove(self, record: ChallengeRecord, caller: Caller) -> None:
        """Raise unless the caller bought this challenge: nobody gets someone else's grant."""
        if not self.proves(record, caller):
            raise TxAlreadyRedeemed("this challenge is already paid, with another payment")
