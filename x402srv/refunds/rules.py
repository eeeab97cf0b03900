"""The rules every store applies to refunds, inside its own atomic step.

A store calls ``decide_create`` with the refunds the purchase already has, as
read inside the same transaction (or Lua script, or lock) that inserts the
new one, so two instances asking at once for the last of a purchase's money
cannot both get it; and ``decide_move`` with the record as read for its
compare-and-set. Keeping the decisions here means memory, sqlite, Redis and
PostgreSQL refuse exactly the same things (``x402srv.testing.StoreContract``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from x402srv.refunds.records import RefundMove, RefundRecord, RefundState

__all__ = [
    "OverRefund",
    "RefundCreated",
    "RefundMismatch",
    "RefundMoved",
    "decide_create",
    "decide_move",
    "listed",
    "refunded",
]


@dataclass(frozen=True, slots=True)
class RefundCreated:
    """``created`` is False when a refund with this id existed (``record`` is that one)."""

    record: RefundRecord
    created: bool = True


@dataclass(frozen=True, slots=True)
class OverRefund:
    """The refund would take the purchase past what it paid; ``left`` is what may still go."""

    purchase_id: str
    left: int


@dataclass(frozen=True, slots=True)
class RefundMoved:
    record: RefundRecord


@dataclass(frozen=True, slots=True)
class RefundMismatch:
    """The refund was not in the expected state; ``record`` is how it is now (None: absent)."""

    record: RefundRecord | None


def refunded(refunds: Iterable[RefundRecord]) -> int:
    """What a purchase's refunds hold: every amount except those that FAILED (nothing moved)."""
    return sum(r.value for r in refunds if r.state is not RefundState.FAILED)


def decide_create(
    existing: Iterable[RefundRecord], refund: RefundRecord, *, paid: int
) -> RefundCreated | OverRefund:
    """Whether ``refund`` may be added to a purchase that paid ``paid`` and has ``existing``."""
    before = list(existing)
    for other in before:
        if other.refund_id == refund.refund_id:
            return RefundCreated(other, created=False)
    left = paid - refunded(before)
    if refund.value > left:
        return OverRefund(refund.purchase_id, max(0, left))
    return RefundCreated(refund)


def decide_move(current: RefundRecord | None, move: RefundMove) -> RefundMoved | RefundMismatch:
    """The record after ``move``, or a mismatch; ``ValueError`` for a move never allowed."""
    if current is None or current.state is not move.expect:
        if current is not None:
            move.apply(current)  # a move the machine never allows raises, whatever the state
        return RefundMismatch(current)
    return RefundMoved(move.apply(current))


def listed(
    refunds: Iterable[RefundRecord],
    *,
    purchase_id: str | None,
    states: Iterable[RefundState] | None,
    after: tuple[float, str] | None,
    limit: int,
) -> list[RefundRecord]:
    """``list_refunds`` over records in hand: the filters, the order and the cursor."""
    wanted = None if states is None else set(states)
    chosen = [
        r
        for r in refunds
        if (purchase_id is None or r.purchase_id == purchase_id)
        and (wanted is None or r.state in wanted)
        and (after is None or (r.created_at, r.refund_id) > after)
    ]
    chosen.sort(key=lambda r: (r.created_at, r.refund_id))
    return chosen[: max(0, limit)]
