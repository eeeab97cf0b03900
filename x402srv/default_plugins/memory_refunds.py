"""The memory store's refunds (``RefundStore``), mixed into ``MemoryStore``.

Each method runs under the store's one lock and never awaits inside it, so
reading a purchase's refunds and adding one is a single atomic step, as
``x402srv.refunds.rules`` needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import (
    OverRefund,
    RefundCreated,
    RefundMismatch,
    RefundMoved,
    decide_create,
    decide_move,
    listed,
)

__all__ = ["MemoryRefunds"]


class MemoryRefunds:
    _lock: asyncio.Lock
    _refunds: dict[str, RefundRecord]

    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        async with self._lock:
            known = self._refunds.get(refund.refund_id)
            if known is not None:
                return RefundCreated(known, created=False)
            siblings = [r for r in self._refunds.values() if r.purchase_id == refund.purchase_id]
            decided = decide_create(siblings, refund, paid=paid)
            if isinstance(decided, RefundCreated) and decided.created:
                self._refunds[refund.refund_id] = refund
            return decided

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        async with self._lock:
            decided = decide_move(self._refunds.get(move.refund_id), move)
            if isinstance(decided, RefundMoved):
                self._refunds[move.refund_id] = decided.record
            return decided

    async def get_refund(self, refund_id: str) -> RefundRecord | None:
        async with self._lock:
            return self._refunds.get(refund_id)

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        async with self._lock:
            return listed(
                self._refunds.values(),
                purchase_id=purchase_id,
                states=states,
                after=after,
                limit=limit,
            )

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        async with self._lock:
            for refund in refunds:
                if refund.refund_id in self._refunds:
                    raise ValueError(f"refund {refund.refund_id} exists")
            for refund in refunds:
                self._refunds[refund.refund_id] = refund
