"""Refund records and their state machine (docs/refunds.md).

    REQUESTED ──► SENDING ──► REFUNDED    the transfer to the buyer is on-chain
        │            │
        │            └──► FAILED          its authorization expired unused: nothing moved
        └──► FAILED                       given up before anything was signed

A refund belongs to one purchase (``purchase_id``: its challengeId). Its
amount is held against what the purchase paid from the moment it is created
until it FAILED: the stores refuse a refund that would take the purchase's
refunds, across every instance, past what it paid (``rules.refunded``).

The transfer is an EIP-3009 authorization signed by the refund wallet, whose
nonce is derived from the refund's id (``refund_nonce``): the token itself
refuses a second transfer of the same refund, whoever sends it and however
often. ``valid_before`` is fixed by the REQUESTED -> SENDING move and never
changes afterwards, so every resend is the very same authorization.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from eth_utils.crypto import keccak

__all__ = [
    "ALLOWED_MOVES",
    "OPEN_STATES",
    "RefundMove",
    "RefundRecord",
    "RefundState",
    "RefundStep",
    "refund_nonce",
]


class RefundState(StrEnum):
    REQUESTED = "REQUESTED"
    SENDING = "SENDING"
    REFUNDED = "REFUNDED"
    FAILED = "FAILED"


#: States a reconciler pass still has to finish.
OPEN_STATES = (RefundState.REQUESTED, RefundState.SENDING)

#: SENDING -> SENDING adds a line to the history (a settler tried, a txHash was broadcast).
ALLOWED_MOVES: frozenset[tuple[RefundState, RefundState]] = frozenset(
    {
        (RefundState.REQUESTED, RefundState.SENDING),
        (RefundState.REQUESTED, RefundState.FAILED),
        (RefundState.SENDING, RefundState.SENDING),
        (RefundState.SENDING, RefundState.REFUNDED),
        (RefundState.SENDING, RefundState.FAILED),
    }
)


def refund_nonce(refund_id: str) -> str:
    """The EIP-3009 nonce of a refund: one refund id, one authorization the token takes once."""
    return "0x" + keccak(text=f"x402srv-refund:{refund_id}").hex()


@dataclass(frozen=True, slots=True)
class RefundStep:
    state: RefundState
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class RefundRecord:
    """One refund of one purchase: ``amount`` atomic units of ``asset`` back to ``to``.

    ``asked_by`` is who asked (``operator``, ``operator:<name>``, or ``auto:<rule>``);
    ``sender`` is the refund wallet (set when it signs); ``revoke_grant`` whether
    the purchase's grant is revoked when the refund is REFUNDED.
    """

    refund_id: str
    purchase_id: str
    network: str
    asset: str
    to: str
    amount: str
    reason: str
    asked_by: str
    state: RefundState
    created_at: float
    updated_at: float
    history: tuple[RefundStep, ...] = ()
    revoke_grant: bool = False
    sender: str | None = None
    valid_before: int | None = None
    tx_hash: str | None = None
    failure: str | None = None
    version: int = 1

    @property
    def nonce(self) -> str:
        return refund_nonce(self.refund_id)

    @property
    def value(self) -> int:
        return int(self.amount)

    @classmethod
    def new(
        cls,
        *,
        refund_id: str,
        purchase_id: str,
        network: str,
        asset: str,
        to: str,
        amount: int,
        reason: str,
        asked_by: str,
        now: float,
        revoke_grant: bool = False,
    ) -> RefundRecord:
        if amount <= 0:
            raise ValueError("a refund's amount must be positive")
        return cls(
            refund_id=refund_id,
            purchase_id=purchase_id,
            network=network,
            asset=asset,
            to=to,
            amount=str(amount),
            reason=reason,
            asked_by=asked_by,
            state=RefundState.REQUESTED,
            created_at=now,
            updated_at=now,
            history=(RefundStep(RefundState.REQUESTED, now, f"requested by {asked_by}: {reason}"),),
            revoke_grant=revoke_grant,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "refund_id": self.refund_id,
            "purchase_id": self.purchase_id,
            "network": self.network,
            "asset": self.asset,
            "to": self.to,
            "amount": self.amount,
            "reason": self.reason,
            "asked_by": self.asked_by,
            "state": self.state.value,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "history": [
                {"state": s.state.value, "at": s.at, "reason": s.reason} for s in self.history
            ],
            "revoke_grant": self.revoke_grant,
            "sender": self.sender,
            "valid_before": self.valid_before,
            "tx_hash": self.tx_hash,
            "failure": self.failure,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RefundRecord:
        values = dict(data)
        values["state"] = RefundState(values["state"])
        values["amount"] = str(int(values["amount"]))
        values["history"] = tuple(
            RefundStep(RefundState(s["state"]), float(s["at"]), str(s["reason"]))
            for s in values.get("history") or ()
        )
        return cls(**values)


@dataclass(frozen=True, slots=True)
class RefundMove:
    """A compare-and-set move of one refund: applied only if it is in ``expect``.

    ``valid_before`` and ``sender`` are set by REQUESTED -> SENDING only; a
    record that has them keeps them (every resend is the same authorization).
    """

    refund_id: str
    expect: RefundState
    to: RefundState
    at: float
    reason: str
    sender: str | None = None
    valid_before: int | None = None
    tx_hash: str | None = None
    failure: str | None = None

    def apply(self, record: RefundRecord) -> RefundRecord:
        """The record after this move; ``ValueError`` for a move the machine does not allow."""
        if (self.expect, self.to) not in ALLOWED_MOVES:
            raise ValueError(f"refund move {self.expect} -> {self.to} is not allowed")
        updates: dict[str, Any] = {
            "state": self.to,
            "updated_at": self.at,
            "history": (*record.history, RefundStep(self.to, self.at, self.reason)),
            "version": record.version + 1,
        }
        if record.sender is None and self.sender is not None:
            updates["sender"] = self.sender
        if record.valid_before is None and self.valid_before is not None:
            updates["valid_before"] = self.valid_before
        if self.tx_hash is not None:
            updates["tx_hash"] = self.tx_hash.lower()
        if self.failure is not None:
            updates["failure"] = self.failure
        return replace(record, **updates)
