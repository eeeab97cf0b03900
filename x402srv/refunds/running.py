"""The refund sender of a running pipeline (server, ``x402srv reconcile``, the CLI).

Built from what the pipeline already holds (its store, settlers and chain
readers) plus the refund wallets of ``[refunds]``; a config without refunds,
or a store that keeps none, has no sender and the pass does nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from x402srv.refunds.records import RefundRecord
from x402srv.refunds.sender import RefundSender
from x402srv.refunds.store import RefundStore, keeps_refunds
from x402srv.refunds.wallet import wallets

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline

__all__ = ["refund_pass", "sender_of"]

log = logging.getLogger("x402srv.refunds")


def sender_of(pipeline: AccessPipeline) -> RefundSender | None:
    config, store = pipeline.config, pipeline.store
    if not config.refunds.enabled or not keeps_refunds(store):
        return None
    assert isinstance(store, RefundStore)
    return RefundSender(
        config,
        store,
        pipeline.settler,
        pipeline.chains,
        wallets(config),
        clock=pipeline.clock,
    )


async def refund_pass(pipeline: AccessPipeline) -> list[RefundRecord]:
    """Every open refund taken as far as it goes now (one reconciler pass's share)."""
    sender = sender_of(pipeline)
    if sender is None:
        return []
    return await sender.pass_over()
