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

``unused_credits``: a grant of a plan that sells calls, revoked while
``auto_unused_credits`` is on, gets back the unused credits' share of each
payment that credited it (its purchase and its top-ups): ``paid * unused //
credited`` atomic units, rounded down, never past what is left to refund of
that payment. The revocation asks at once (``tokens.revocation.revoke_grant``);
its history line carries ``UNUSED_MARK``, and every pass refunds each marked
grant on the revocation list that has no such refund yet (a process killed
between revoking and asking).

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

__all__ = [
    "OWED_TOP_UP",
    "UNDELIVERED",
    "UNUSED_CREDITS",
    "UNUSED_MARK",
    "marked",
    "owed_top_ups",
    "paid_at",
    "refunds_unused_credits",
    "revoked_grants",
    "undelivered",
    "unused_credits",
    "unused_share",
]

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


#: Who asks for the refund of unused credits, and what the revocation's history line says
#: when the rule was on as the grant was revoked (the pass refunds only those grants).
UNUSED_CREDITS = "auto:unused-credits"
UNUSED_MARK = "unused credits refunded pro rata"


def unused_share(paid: int, unused: int, credited: int, left: int) -> int:
    """The unused credits' share of ``paid``: atomic units, rounded down, never past ``left``."""
    if credited <= 0 or unused <= 0:
        return 0
    return max(0, min(paid * min(unused, credited) // credited, left))


async def unused_credits(pipeline: AccessPipeline, grant: ChallengeRecord) -> list[RefundRecord]:
    """A refund of each payment of a revoked grant (its purchase, its top-ups), pro rata.

    The grant's credit account lists every payment that credited it (``entries``,
    keyed by the paying challenge); each gets back ``paid * unused // credited``,
    capped at what is left of it. A payment that already has this rule's refund is
    skipped, so every pass may run this again.
    """
    from x402srv.errors import NotFound
    from x402srv.interfaces import CreditStore
    from x402srv.refunds.service import money_of

    store = pipeline.store
    if not isinstance(store, CreditStore):
        return []
    account = await store.get_credits(grant.challenge_id)
    if account is None:
        return []
    credited = sum(entry.amount for entry in account.entries)
    asked: list[RefundRecord] = []
    for entry in account.entries:
        try:
            money = await money_of(store, entry.key)
        except NotFound:
            continue
        if any(r.asked_by == UNUSED_CREDITS for r in money.refunds):
            continue
        amount = unused_share(money.paid, account.balance, credited, money.left)
        if amount <= 0:
            continue
        try:
            asked.append(
                await request_refund(
                    store,
                    pipeline.config,
                    entry.key,
                    amount=amount,
                    reason=f"{account.balance} of {credited} calls unused when grant "
                    f"{grant.challenge_id} was revoked",
                    asked_by=UNUSED_CREDITS,
                    revoke_grant=False,
                    clock=pipeline.clock,
                )
            )
        except (StateConflict, InvalidRequest) as exc:
            log.info("unused credits of %s not refunded: %s", entry.key, exc.detail)
    return asked


def marked(grant: ChallengeRecord) -> bool:
    """Whether the grant was revoked while ``auto_unused_credits`` was on."""
    return grant.revoked_at is not None and any(
        step.state is State.DELIVERED and UNUSED_MARK in step.reason for step in grant.history
    )


async def revoked_grants(pipeline: AccessPipeline) -> list[RefundRecord]:
    """``unused_credits`` of every grant on the revocation list that the rule covers.

    What a process killed between revoking and asking for the refunds left undone.
    Only grants revoked while the rule was on carry its mark; the list holds the
    grants whose tokens may still be presented (a few, revocations are rare acts).
    """
    from x402srv.tokens.revocation import RevocationBook

    entries, _ = await RevocationBook(pipeline.store).read()
    asked: list[RefundRecord] = []
    for challenge_id in sorted(entries):
        grant = await pipeline.store.get_challenge(challenge_id)
        if grant is not None and marked(grant):
            asked.extend(await unused_credits(pipeline, grant))
    return asked


def refunds_unused_credits(pipeline: AccessPipeline, record: ChallengeRecord) -> bool:
    """Whether revoking this grant refunds its unused credits (``[refunds] auto_unused_credits``
    and a plan that sells calls; docs/refunds.md)."""
    config = pipeline.config
    if not config.refunds.auto_unused_credits or not config.refunds.enabled:
        return False
    plan = pipeline.plans.get(record.plan_id)
    return record.calls is not None or (plan is not None and plan.calls is not None)
