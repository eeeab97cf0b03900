"""Challenge records and their state machine (docs/protocol/states.md).

    PENDING ──► SETTLING ──► PAID ──► DELIVERED ──┐
       │  ▲         │         │             ▲        │ revoked by the seller
       │  └─────────┘         │             └────────┘ (``revoked_at``; the grant stays)
       │   definite settlement failure (the claim stays; the payment too while it
       │   may still move: ``given_back``)
       │                      └──► OWED     a top-up paid for a grant that was revoked or
       │                                    expired before it could be credited, or a
       │                                    purchase whose credential was not issued in
       │                                    time: the payment is owed back to the buyer
       │                                    (refunds)
       ├──► EXPIRED     past expiresAt
       └──► CANCELLED   operator

Records are plain dataclasses with a JSON form (``to_dict``/``from_dict``) that
every store keeps verbatim, so a record written by one store plugin reads the
same in another and in ``x402srv challenges show``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "ChallengeRecord",
    "Offer",
    "PaymentDetails",
    "PaymentKey",
    "RecordChanges",
    "State",
    "Transition",
]


class State(StrEnum):
    PENDING = "PENDING"
    SETTLING = "SETTLING"
    PAID = "PAID"
    DELIVERED = "DELIVERED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"
    #: Paid, but nothing could be delivered for it: the money is owed back to the payer.
    OWED = "OWED"


#: Moves the state machine allows; stores refuse every other move (SETTLING →
#: SETTLING is a lease update by the attempt that holds it; PAID → PAID takes
#: the delivery claim, so one request at a time calls the credential issuer;
#: DELIVERED -> DELIVERED records a revocation in the history; PAID -> OWED is a
#: top-up whose grant can no longer use what it paid for, or a purchase not delivered in
#: time, ``[refunds] auto_undelivered_after_seconds``).
ALLOWED_TRANSITIONS: frozenset[tuple[State, State]] = frozenset(
    {
        (State.PENDING, State.SETTLING),
        (State.PENDING, State.EXPIRED),
        (State.PENDING, State.CANCELLED),
        (State.SETTLING, State.SETTLING),
        (State.SETTLING, State.PENDING),
        (State.SETTLING, State.PAID),
        (State.PAID, State.PAID),
        (State.PAID, State.DELIVERED),
        (State.PAID, State.OWED),
        (State.DELIVERED, State.DELIVERED),
    }
)


@dataclass(frozen=True, slots=True)
class PaymentKey:
    """Identity of an EIP-3009 authorization: the chain spends it at most once.

    Keyed by the authorization, not the signature, so a re-encoded (malleated)
    signature of the same authorization is the same payment.
    """

    chain_id: int
    asset: str
    payer: str
    nonce: str

    def __str__(self) -> str:
        return f"{self.chain_id}:{self.asset.lower()}:{self.payer.lower()}:{self.nonce.lower()}"


@dataclass(frozen=True, slots=True)
class Offer:
    """One requirement a challenge offers: ``amount`` of ``asset`` on ``network`` (CAIP-2)."""

    network: str
    asset: str
    amount: str

    def to_dict(self) -> dict[str, str]:
        return {"network": self.network, "asset": self.asset, "amount": self.amount}


@dataclass(frozen=True, slots=True)
class PaymentDetails:
    """The authorization being settled, persisted with the SETTLING transition.

    A PENDING record holds one only after a settler gave it back, until the chain
    shows it can no longer move (``x402srv.access.given_back``).

    ``submitted`` turns true (with a new ``attempt_id``) in its own compare-and-set
    right before the authorization is handed to the settler. Until then nothing
    left this server, so recovery may move the record back to PENDING; afterwards
    the outcome is only ever read from the chain.
    """

    payer: str
    nonce: str
    value: str
    valid_after: int
    valid_before: int
    signature: str
    key: str
    attempt_id: str
    lease_until: float
    broadcast_tx_hash: str | None = None
    submitted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "payer": self.payer,
            "nonce": self.nonce,
            "value": self.value,
            "valid_after": self.valid_after,
            "valid_before": self.valid_before,
            "signature": self.signature,
            "key": self.key,
            "attempt_id": self.attempt_id,
            "lease_until": self.lease_until,
            "broadcast_tx_hash": self.broadcast_tx_hash,
            "submitted": self.submitted,
        }


@dataclass(frozen=True, slots=True)
class Transition:
    state: State
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class ChallengeRecord:
    """One challenge and everything needed to answer its replays.

    ``amount``/``asset``/``network``/``pay_to``/``max_timeout_seconds`` are the
    requirement offered when the challenge was created: a replay gets exactly
    what was offered even if the seller edits prices meanwhile. A plan paid on
    several networks or tokens offers each in ``options`` (empty: the record's
    own network, asset and amount are the one offer); the claim of a payment
    sets ``network``/``asset``/``amount`` to the option that payment chose.
    ``calls`` are the credits its delivery adds, for plans that sell calls;
    ``top_up_of`` names the grant (its challengeId) a top-up adds its credits to.
    """

    challenge_id: str
    request_id: str
    plan_id: str
    resource_id: str
    amount: str
    network: str
    asset: str
    pay_to: str
    max_timeout_seconds: int
    state: State
    created_at: float
    expires_at: float
    updated_at: float
    implicit: bool = False
    payment: PaymentDetails | None = None
    payer: str | None = None
    tx_hash: str | None = None
    grant: dict[str, Any] | None = None
    history: tuple[Transition, ...] = field(default_factory=tuple)
    options: tuple[Offer, ...] = ()
    calls: int | None = None
    top_up_of: str | None = None
    #: When the seller revoked the grant (``x402srv.tokens.revocation``); None while it stands.
    revoked_at: float | None = None

    @property
    def offers(self) -> tuple[Offer, ...]:
        """Every requirement this challenge offers (its options, else its own one)."""
        return self.options or (Offer(self.network, self.asset, self.amount),)

    def offer_for(self, network: str, asset: str) -> Offer | None:
        """The offer of ``asset`` (any letter case) on ``network``, if this challenge makes it."""
        wanted = asset.lower()
        for offer in self.offers:
            if offer.network == network and offer.asset.lower() == wanted:
                return offer
        return None

    @classmethod
    def new(
        cls,
        *,
        challenge_id: str,
        request_id: str,
        plan_id: str,
        resource_id: str,
        amount: str,
        network: str,
        asset: str,
        pay_to: str,
        max_timeout_seconds: int,
        now: float,
        ttl_seconds: float,
        implicit: bool = False,
        options: tuple[Offer, ...] = (),
        calls: int | None = None,
        top_up_of: str | None = None,
    ) -> ChallengeRecord:
        """A fresh PENDING challenge offering ``amount`` of ``asset`` (or ``options``)."""
        return cls(
            challenge_id=challenge_id,
            request_id=request_id,
            plan_id=plan_id,
            resource_id=resource_id,
            amount=amount,
            network=network,
            asset=asset,
            pay_to=pay_to,
            max_timeout_seconds=max_timeout_seconds,
            state=State.PENDING,
            created_at=now,
            expires_at=now + ttl_seconds,
            updated_at=now,
            implicit=implicit,
            history=(Transition(State.PENDING, now, "challenge created"),),
            options=options,
            calls=calls,
            top_up_of=top_up_of,
        )

    def to_dict(self) -> dict[str, Any]:
        # Written out (not ``dataclasses.asdict``): records are encoded on every
        # store write, and the generic recursive copy costs several times more.
        # The keys are the fields, in field order.
        return {
            "challenge_id": self.challenge_id,
            "request_id": self.request_id,
            "plan_id": self.plan_id,
            "resource_id": self.resource_id,
            "amount": self.amount,
            "network": self.network,
            "asset": self.asset,
            "pay_to": self.pay_to,
            "max_timeout_seconds": self.max_timeout_seconds,
            "state": self.state.value,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "updated_at": self.updated_at,
            "implicit": self.implicit,
            "payment": self.payment.to_dict() if self.payment is not None else None,
            "payer": self.payer,
            "tx_hash": self.tx_hash,
            "grant": copy.deepcopy(self.grant) if self.grant is not None else None,
            "history": [
                {"state": t.state.value, "at": t.at, "reason": t.reason} for t in self.history
            ],
            "options": [offer.to_dict() for offer in self.options],
            "calls": self.calls,
            "top_up_of": self.top_up_of,
            "revoked_at": self.revoked_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChallengeRecord:
        values = dict(data)
        values["state"] = State(values["state"])
        payment = values.get("payment")
        values["payment"] = PaymentDetails(**payment) if payment else None
        values["history"] = tuple(
            Transition(State(t["state"]), float(t["at"]), str(t["reason"]))
            for t in values.get("history") or ()
        )
        values["options"] = tuple(Offer(**offer) for offer in values.get("options") or ())
        return cls(**values)

    def apply(self, change: RecordChanges, to: State, at: float, reason: str) -> ChallengeRecord:
        """The record after a transition; stores call this inside their atomic section."""
        updates: dict[str, Any] = {"state": to, "updated_at": at}
        for name in ("payer", "tx_hash", "grant", "revoked_at"):
            value = getattr(change, name)
            if value is not None:
                updates[name] = value
        if change.offer is not None:  # the claim: the option the payment chose
            offer = change.offer
            updates.update(network=offer.network, asset=offer.asset, amount=offer.amount)
        if change.clear_payment:
            updates["payment"] = None
        elif change.payment is not None:
            updates["payment"] = change.payment
        # Every move is kept, SETTLING -> SETTLING too (hand-over, broadcast, lease
        # ended): they are what an operator needs to see when a payment is stuck.
        updates["history"] = (*self.history, Transition(to, at, reason))
        return replace(self, **updates)


@dataclass(frozen=True, slots=True)
class RecordChanges:
    """Fields a transition sets; ``None`` leaves a field as it is."""

    payment: PaymentDetails | None = None
    clear_payment: bool = False
    payer: str | None = None
    tx_hash: str | None = None
    grant: dict[str, Any] | None = None
    revoked_at: float | None = None
    offer: Offer | None = None
