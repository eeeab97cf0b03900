"""Step 5: a payment against the requirement a challenge was offered (docs/protocol/proof.md).

A challenge may offer several networks and tokens: a payment is checked
against the offer it claims (``accepted.network`` and ``accepted.asset``), with
that token's amount and EIP-712 domain (config's, never a payload's); once a
payment is claimed, only the offer it chose. ``check`` includes the window of
validity (a payment about to be settled); ``verify`` leaves it out (the proof
of a purchase: a paid buyer may come back after ``validBefore``).

``payment_key`` is what steps 6-7 claim: ``(chainId, asset, from, nonce)``.
"""

from __future__ import annotations

import re
from typing import Any

from x402srv.access.progress import CheckedPayment, SentPayment
from x402srv.access.records import ChallengeRecord, Offer, PaymentKey, State
from x402srv.errors import PaymentFailed
from x402srv.interfaces import Clock
from x402srv.wire.eip712 import Eip3009Domain
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.offers import OfferBuilder
from x402srv.wire.protocol import PaymentPayload, check_payment
from x402srv.wire.reasons import Reason

__all__ = ["PaymentCheck", "payment_key", "sent_payment"]

_CAIP2 = re.compile(r"eip155:([1-9][0-9]{0,18})")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def payment_key(payment: PaymentPayload) -> PaymentKey:
    """``(chainId, asset, from, nonce)`` of the network and token the payment claims.

    A claim names the chain it is spent on: the same nonce on two chains is two
    payments. A payment that names no EVM chain or token is refused (402) here.
    """
    accepted = payment.accepted
    chain = _CAIP2.fullmatch(accepted.network)
    if chain is None:
        raise PaymentFailed(Reason.INVALID_NETWORK, "accepted.network is not an eip155 network")
    if not _ADDRESS.fullmatch(accepted.asset):
        raise PaymentFailed(Reason.INVALID_PAYMENT_REQUIREMENTS, "accepted.asset is no address")
    auth = payment.payload.authorization
    return PaymentKey(int(chain.group(1)), accepted.asset, auth.from_, auth.nonce)


def sent_payment(payment: PaymentPayload) -> SentPayment:
    """The payment with its key; 402 for one that names no EVM chain or token."""
    return SentPayment(payment, payment_key(payment))


class PaymentCheck:
    """Checks payments against the requirements challenges were offered with."""

    def __init__(self, offers: OfferBuilder, clock: Clock) -> None:
        self.offers = offers
        self.clock = clock
        self._domains: dict[tuple[str, str], Eip3009Domain] = {}

    def check(self, record: ChallengeRecord, payment: SentPayment) -> CheckedPayment:
        """Step 5 against this challenge, window included; the result is kept on ``payment``."""
        checked = payment.checked
        if checked is None or checked.challenge_id != record.challenge_id:
            checked = self._checked(record, payment, window=True)
            payment.checked = payment.verified = checked
        return checked

    def verify(self, record: ChallengeRecord, payment: SentPayment) -> CheckedPayment:
        """Step 5 against this challenge, its window aside (what the proof of purchase needs)."""
        verified = payment.verified
        if verified is None or verified.challenge_id != record.challenge_id:
            verified = payment.verified = self._checked(record, payment, window=False)
        return verified

    def _checked(
        self, record: ChallengeRecord, payment: SentPayment, *, window: bool
    ) -> CheckedPayment:
        offer, offered = self._claimed(record, payment.payload)
        option = self.offers.option_of(offer)
        auth = check_payment(
            payment.payload, offered, option, self._domain(option), self.clock(), window=window
        )
        return CheckedPayment(
            record.challenge_id, payment.payload, payment.key, auth, offer, option
        )

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
    ) -> tuple[Offer, dict[str, Any]]:
        """The offer the payment claims (one of a PENDING challenge's, else the one it chose),
        and the requirement it was offered with (410 once the seller no longer offers it)."""
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
        return offer, self.offers.offered_requirement(record, offer)
