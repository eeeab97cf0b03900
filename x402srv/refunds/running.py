"""The refund sender of a running pipeline (server, ``x402srv reconcile``, the CLI).

Built from what the pipeline already holds (its store, settlers and chain
readers) plus the refund wallets of ``[refunds]``; a config without refunds,
or a store that keeps none, has no sender and the pass does nothing. A refund
that ends REFUNDED is counted, and one that gave back the whole purchase
revokes its grant (``revoke_when_repaid``) before the refund is marked REFUNDED:
a crash in between leaves it SENDING, and the next pass, seeing the transfer on
chain, revokes (again: a no-op) and marks it then. Revoking after the mark would
leave a refunded grant standing when a crash fell between the two.
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
    from x402srv.access.records import ChallengeRecord
    from x402srv.access.records import ChallengeRecord as RecordLike

__all__ = ["refund_pass", "refund_unused_credits", "revoke_when_repaid", "sender_of"]

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
        on_refunded=lambda refund: after_refund(pipeline, refund),
        on_transferred=lambda refund: revoke_when_repaid(pipeline, refund),
    )


async def after_refund(pipeline: AccessPipeline, refund: RefundRecord) -> None:
    """A refund that ended REFUNDED is counted (by the process whose move ended it): once,
    and its amount against its purchase's plan, so the console's revenue is net of it."""
    counters = pipeline.counters
    counters.add(f"refunded:{refund.asked_by.split(':')[0]}")
    purchase = await pipeline.store.get_challenge(refund.purchase_id)
    plan = purchase.plan_id if purchase is not None else "(unknown)"
    counters.add(f"refund:{plan}|{refund.network}|{refund.asset}", refund.value)
    counters.kick()


async def revoke_when_repaid(pipeline: AccessPipeline, refund: RefundRecord) -> None:
    """A refund that gives back everything the purchase paid revokes its grant (unless told
    not to, ``revoke_grant``): the buyer has their money, not the access it bought.

    Called once the chain shows the refund's transfer, before it is marked REFUNDED (a
    SENDING refund already counts against what is left, see ``rules.refunded``).
    """
    from x402srv.access.records import State
    from x402srv.refunds.service import money_of

    if not refund.revoke_grant:
        return
    money = await money_of(pipeline.store, refund.purchase_id)
    purchase = money.purchase
    if money.left > 0 or purchase.state is not State.DELIVERED or purchase.top_up_of:
        return
    if purchase.revoked_at is None:
        await revoke(
            pipeline, purchase.challenge_id, reason=f"refunded in full ({refund.refund_id})"
        )


async def revoke(
    pipeline: AccessPipeline, challenge_id: str, *, reason: str
) -> tuple[ChallengeRecord, bool]:
    """Revoke a grant (``tokens.revocation.revoke_grant``) and, with ``[refunds]
    auto_unused_credits``, refund its unused credits pro rata (docs/refunds.md).

    The operators' revocations (CLI, admin API, console) come through here. The
    history line is marked first, so a pass finishes what a crash cut short.
    """
    from x402srv.refunds.automatic import UNUSED_MARK, refunds_unused_credits
    from x402srv.tokens.revocation import revoke_grant

    def marked(record: ChallengeRecord) -> str | None:
        return UNUSED_MARK if refunds_unused_credits(pipeline, record) else None

    record, revoked_now = await revoke_grant(pipeline, challenge_id, reason=reason, mark=marked)
    if revoked_now and refunds_unused_credits(pipeline, record):
        await refund_unused_credits(pipeline, record)
    return record, revoked_now


async def refund_pass(pipeline: AccessPipeline) -> list[RefundRecord]:
    """Every open refund taken as far as it goes now (one reconciler pass's share)."""
    sender = sender_of(pipeline)
    if sender is None:
        return []
    rules = pipeline.config.refunds
    if rules.auto_owed_top_ups:
        from x402srv.refunds.automatic import owed_top_ups

        await owed_top_ups(pipeline)
    if rules.auto_undelivered_after_seconds is not None:
        from x402srv.refunds.automatic import undelivered

        await undelivered(pipeline)
    if rules.auto_unused_credits:
        from x402srv.refunds.automatic import revoked_grants

        await revoked_grants(pipeline)
    return await sender.pass_over()


async def refund_unused_credits(pipeline: AccessPipeline, grant: RecordLike) -> list[RefundRecord]:
    """A revocation's refunds of unused credits (``auto_unused_credits``), asked and sent now.

    Never fails the revocation: what could not be asked or sent here is left to
    the next reconciler pass (``automatic.revoked_grants``, the sender's pass).
    """
    from x402srv.refunds.automatic import unused_credits

    sender = sender_of(pipeline)
    if sender is None:
        return []
    try:
        asked = await unused_credits(pipeline, grant)
        return [await sender.send(refund) for refund in asked]
    except Exception as exc:
        log.warning("unused credits of %s: left to the next pass (%s)", grant.challenge_id, exc)
        return []
