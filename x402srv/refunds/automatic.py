"""Automatic refunds, each off by default (``[refunds] auto_*``, docs/refunds.md).

``owed_top_ups``: a top-up paid for a grant that was revoked or expired before
it could be credited is OWED to its buyer (docs/protocol/states.md); each
reconciler pass asks for the refund of every OWED record that has none yet.
Two passes (or an operator) asking at once cannot refund it twice: the store's
claim refuses whatever would pass what the top-up paid.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from x402srv.access.records import State
from x402srv.errors import StateConflict
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.service import refund_store, request_refund

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline

__all__ = ["OWED_TOP_UP", "owed_top_ups"]

log = logging.getLogger("x402srv.refunds.automatic")

#: Who asks, as the refund's record and the counters name it.
OWED_TOP_UP = "auto:owed-top-up"
PAGE = 100


async def owed_top_ups(pipeline: AccessPipeline) -> list[RefundRecord]:
    """A refund of what is left of every OWED top-up that has no refund yet."""
    store = pipeline.store
    asked: list[RefundRecord] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.list_challenges(states=[State.OWED], after=after, limit=PAGE)
        for record in page:
            if await refund_store(store).list_refunds(purchase_id=record.challenge_id, limit=1):
                continue
            try:
                asked.append(
                    await request_refund(
                        store,
                        pipeline.config,
                        record.challenge_id,
                        amount=None,
                        reason="the top-up could not be credited (its grant was gone)",
                        asked_by=OWED_TOP_UP,
                        revoke_grant=False,
                        clock=pipeline.clock,
                    )
                )
            except StateConflict as exc:  # someone refunded it meanwhile, or no wallet there
                log.info("owed top-up %s not refunded: %s", record.challenge_id, exc.detail)
        if len(page) < PAGE:
            return asked
        after = (page[-1].updated_at, page[-1].challenge_id)
