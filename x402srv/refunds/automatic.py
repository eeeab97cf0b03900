"""Automatic refunds, each off by default (``[refunds] auto_*``, docs/refunds.md).

Each rule runs in every reconciler pass (``running.refund_pass``), before the
pass sends the open refunds, so what a rule asks for is sent in the same pass.

``owed_top_ups``: a top-up paid for a grant that was revoked or expired before
it could be credited is OWED to its buyer (docs/protocol/states.md); each
pass asks for the refund of every OWED top-up that has none yet.

``undelivered``: a purchase paid ``auto_undelivered_after_seconds`` ago whose
credential could still not be issued. The pass first moves it PAID -> OWED
(``moves.give_up``), a compare-and-set on the delivery attempt it read: a
delivery that claimed the record meanwhile, or delivered it, wins and nothing
is refunded; once the move applied no delivery can follow (every delivery
expects PAID). Then, as for top-ups, every OWED purchase without a refund is
refunded: a process killed between the move and the refund leaves an OWED
record the next pass finds.

Two passes (or an operator) asking at once cannot refund a purchase twice: the
store's claim refuses whatever would pass what it paid.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from x402srv.access import moves
from x402srv.access.records import ChallengeRecord, State
from x402srv.errors import InvalidRequest, StateConflict
from x402srv.interfaces import TransitionApplied
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.service import refund_store, request_refund

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline

__all__ = ["OWED_TOP_UP", "UNDELIVERED", "owed_top_ups", "paid_at", "undelivered"]

log = logging.getLogger("x402srv.refunds.automatic")

#: Who asks, as the refund's record and the counters name it.
OWED_TOP_UP = "auto:owed-top-up"
UNDELIVERED = "auto:undelivered"
PAGE = 100


async def _records(pipeline: AccessPipeline, state: State) -> AsyncIterator[ChallengeRecord]:
    after: tuple[float, str] | None = None
    while True:
        page = await pipeline.store.list_challenges(states=[state], after=after, limit=PAGE)
        for record in page:
            yield record
        if len(page) < PAGE:
            return
        after = (page[-1].updated_at, page[-1].challenge_id)


async def _refund_owed(
    pipeline: AccessPipeline, record: ChallengeRecord, reason: str, asked_by: str
) -> RefundRecord | None:
    """A refund of what is left of an OWED record that has no refund yet (else None)."""
    store = pipeline.store
    if await refund_store(store).list_refunds(purchase_id=record.challenge_id, limit=1):
        return None
    try:
        return await request_refund(
            store,
            pipeline.config,
            record.challenge_id,
            amount=None,
            reason=reason,
            asked_by=asked_by,
            revoke_grant=False,
            clock=pipeline.clock,
        )
    except (StateConflict, InvalidRequest) as exc:  # refunded meanwhile, or no wallet there
        log.info("owed purchase %s not refunded: %s", record.challenge_id, exc.detail)
        return None


async def owed_top_ups(pipeline: AccessPipeline) -> list[RefundRecord]:
    """A refund of what is left of every OWED top-up that has no refund yet."""
    asked: list[RefundRecord] = []
    async for record in _records(pipeline, State.OWED):
        if record.top_up_of is None:
            continue  # a purchase never delivered: ``undelivered`` refunds it
        why = "the top-up could not be credited (its grant was gone)"
        refund = await _refund_owed(pipeline, record, why, OWED_TOP_UP)
        if refund is not None:
            asked.append(refund)
    return asked


def paid_at(record: ChallengeRecord) -> float:
    """When the purchase was paid (its move to PAID; its last update if that is not kept)."""
    return next((t.at for t in record.history if t.state is State.PAID), record.updated_at)


async def undelivered(pipeline: AccessPipeline) -> list[RefundRecord]:
    """PAID -> OWED for each purchase paid longer ago than the deadline, then its refund."""
    deadline = pipeline.config.refunds.auto_undelivered_after_seconds
    assert deadline is not None
    now = pipeline.clock()
    async for record in _records(pipeline, State.PAID):
        # A top-up is credited, not issued: crediting and then owing it would pay twice.
        if record.top_up_of is not None or record.payment is None:
            continue
        if paid_at(record) + deadline > now or record.payment.lease_until > now:
            continue  # not late yet, or a delivery holds the record right now
        why = f"its credential could not be issued within {deadline} s of payment"
        result = await pipeline.transition(moves.give_up(record, now, why))
        if isinstance(result, TransitionApplied):
            log.warning(
                "challenge %s: paid (tx %s) but not delivered in %d s; owed to the buyer",
                record.challenge_id,
                record.tx_hash,
                deadline,
            )
    asked: list[RefundRecord] = []
    async for record in _records(pipeline, State.OWED):
        if record.top_up_of is not None:
            continue
        why = "its credential could not be issued in time (never delivered)"
        refund = await _refund_owed(pipeline, record, why, UNDELIVERED)
        if refund is not None:
            asked.append(refund)
    return asked
