"""What a store implements to keep refunds (``RefundStore``, optional beside ``Store``).

Every method is one atomic step across every process that shares the store.
``create_refund`` is the claim that keeps a purchase from being refunded for
more than it paid, across every refund and every instance; ``move_refund``
the compare-and-set every state change goes through. The decisions themselves
are ``x402srv.refunds.rules``; ``x402srv.testing.StoreContract`` checks them on
every store that has these methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import OverRefund, RefundCreated, RefundMismatch, RefundMoved

__all__ = ["RefundStore", "keeps_refunds"]


@runtime_checkable
class RefundStore(Protocol):
    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        """Insert ``refund`` unless the purchase's refunds would then pass ``paid``.

        ``rules.decide_create`` decides, on the purchase's refunds as read in
        the same atomic step. A refund id that exists answers that record
        (``created=False``), whatever the amount asked.
        """

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        """Apply ``move`` if the refund is in ``move.expect`` (``rules.decide_move``)."""

    async def get_refund(self, refund_id: str) -> RefundRecord | None: ...

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        """Refunds in ``(created_at, refund_id)`` order, oldest first, strictly after ``after``."""

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        """Write exported refunds as they are; a refund id that exists raises ``ValueError``
        and nothing of the batch is written."""


def keeps_refunds(store: object) -> bool:
    """Whether ``store`` keeps refunds (a wrapper answers for the store inside it)."""
    inner = getattr(store, "keeps_refunds", None)
    if isinstance(inner, bool):
        return inner
    return isinstance(store, RefundStore)
