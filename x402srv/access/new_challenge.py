"""Step 2's challenge: a new PENDING record for a plan, and the check a found one must pass.

A challenge is created once per ``requestId``: the same request sent again finds
it, and must be the same purchase (plan, resource, and the grant it tops up);
anything else is 409 REQUEST_ID_CONFLICT, worded so that it names nothing stored
(docs/design.md, "Who gets a grant"): that answer may reach a caller that has
proven nothing yet. A discovery-first purchase makes its record here too
(``implicit``), then creates it already SETTLING (``implicit_purchase``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from x402srv.access.ids import uuid4_str
from x402srv.access.records import ChallengeRecord
from x402srv.config.models import Config, Plan
from x402srv.errors import InternalError, RequestIdConflict
from x402srv.interfaces import Clock, PaymentClaimed, Store
from x402srv.server.logs import fingerprint
from x402srv.server.metrics import Metrics
from x402srv.usage.counters import Counters
from x402srv.wire.offers import plan_offers
from x402srv.wire.protocol import AccessBody

__all__ = ["ChallengeMaker", "same_purchase"]

log = logging.getLogger("x402srv.access.pipeline")


def same_purchase(
    record: ChallengeRecord, body: AccessBody, plan: Plan, grant: ChallengeRecord | None
) -> None:
    """409 unless ``record`` is the purchase this request asks for (plan, resource, top-up)."""
    if record.plan_id != plan.plan_id or record.resource_id != body.resource_id:
        raise RequestIdConflict(
            "this request belongs to a purchase of another plan or resource; "
            "use a new requestId for another purchase"
        )
    if record.top_up_of != (grant.challenge_id if grant is not None else None):
        if record.top_up_of is None:
            what = "a purchase"
        elif grant is None:
            what = "a top-up: repeat it with its topUp (or the grant's token)"
        else:
            what = "a top-up of another grant"
        raise RequestIdConflict(f"this request belongs to {what}; use a new requestId")


@dataclass(frozen=True, slots=True)
class ChallengeMaker:
    """Makes challenge records for the configured plans, and counts the ones it creates."""

    config: Config
    store: Store
    clock: Clock
    metrics: Metrics
    counters: Counters

    async def open(
        self, body: AccessBody, request_id: str, plan: Plan, grant: ChallengeRecord | None
    ) -> ChallengeRecord:
        """The PENDING challenge of ``request_id``: created now, or found as it is."""
        new = self.record(plan, request_id, body.resource_id, grant=grant)
        created = await self.store.create_challenge(new)
        if isinstance(created, PaymentClaimed):  # nothing was to be claimed: a broken store
            raise InternalError()
        record, was_created = created
        if was_created:
            # DEBUG, not INFO: anyone can send unpaid requests, and a line for each
            # would let them fill the disk. Everything after a payment is at INFO.
            self.note_created(record, logging.DEBUG)
        same_purchase(record, body, plan, grant)
        return record

    def record(
        self,
        plan: Plan,
        request_id: str,
        resource_id: str,
        *,
        implicit: bool = False,
        grant: ChallengeRecord | None = None,
    ) -> ChallengeRecord:
        """A new PENDING record of ``plan``, offering every network and token of it."""
        first = plan.options[0]
        return ChallengeRecord.new(
            challenge_id=uuid4_str(),
            request_id=request_id,
            plan_id=plan.plan_id,
            resource_id=resource_id,
            amount=str(first.amount),
            network=first.network.caip2,
            asset=first.network.asset,
            pay_to=self.config.seller.wallet_address,
            max_timeout_seconds=self.config.server.max_timeout_seconds,
            now=self.clock(),
            ttl_seconds=self.config.server.challenge_ttl_seconds,
            implicit=implicit,
            options=plan_offers(plan),
            calls=plan.calls,
            top_up_of=grant.challenge_id if grant is not None else None,
        )

    def note_created(self, record: ChallengeRecord, level: int = logging.INFO) -> None:
        """Count a stored challenge, and log it (without its requestId: a secret)."""
        self.metrics.challenge_created()
        self.counters.add(f"challenge:{record.plan_id}")
        if log.isEnabledFor(level):
            log.log(
                level,
                "challenge %s request %s: created as %s for plan %s",
                record.challenge_id,
                fingerprint(record.request_id),
                record.state.value,
                record.plan_id,
                extra={
                    "challenge_id": record.challenge_id,
                    "request_fp": fingerprint(record.request_id),
                },
            )
