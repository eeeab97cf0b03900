"""The reconciler: finishes what requests left behind, then tidies up.

What it decides, and why nothing is lost: docs/protocol/states.md.

One pass, in this order, each step a compare-and-set through the pipeline's own
code (``AccessPipeline.resolve`` and ``deliver``), so a pass running beside live
traffic or beside another pass can only lose races, never double anything:

1. Every SETTLING record: the chain decides at once (``settling``): transferred
   -> PAID, and on to step 2, whatever lease or grace is running; not
   transferred -> PENDING, but only once the record's lease (plus
   ``grace_seconds``) is over; else left alone (and reported if its lease is over).
2. Every PAID record nobody is delivering: the credential is issued and the
   record becomes DELIVERED (the buyer gets it by retrying the same request).
   Then every open refund (REQUESTED, SENDING): the chain decides it, or it is
   sent again, the same authorization (``x402srv.refunds.sender``).
3. PENDING records past expiresAt -> EXPIRED (a page's moves at once); one
   that kept a payment a settler gave back only once the chain shows it can no
   longer move, and PAID, then delivered, if the chain shows it moved.
4. Pruning: delivered records after ``retention_days``; never-paid ones
   (EXPIRED, CANCELLED: a PENDING one expires first) and unpaid A2A tasks
   after ``unpaid_retention_hours``.

Each step pages through the store with a cursor on ``(updated_at,
challenge_id)``, so records it cannot decide never keep it from the ones behind
them. In a server the pass runs every ``interval_seconds`` in each worker, but
under a store lease so only one runs at a time across workers and instances;
``x402srv reconcile`` runs one pass by hand.

Each pass run under the lease leaves a summary in the store (the versioned
document ``STATUS_DOCUMENT``: when it ran, where, what it changed and what it
could not decide), which the seller's console shows from any instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from x402srv.access.given_back import kept_payment
from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import ReconcilerConfig
from x402srv.errors import CredentialPending, StoreUnavailable
from x402srv.interfaces import Store
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.running import refund_pass
from x402srv.server.logs import fingerprint

__all__ = ["STATUS_DOCUMENT", "Change", "PassReport", "Reconciler", "last_pass"]

log = logging.getLogger("x402srv.access.reconciler")

LEASE_NAME = "x402srv-reconciler"
#: The store document holding the last pass's summary (no A2A task id looks like this).
STATUS_DOCUMENT = "x402srv.access.reconciler.last-pass"
#: Unresolved challenge ids kept in the summary at most.
MAX_LISTED = 100
#: Kept for ``retention_days``: replays of a purchase must still find their grant.
PAID_FOR = (State.DELIVERED,)
#: Kept for ``unpaid_retention_hours``: nothing was paid, so nothing is owed to anyone. Not
#: PENDING: a PENDING record expires first (step 3), and one that holds a payment given back
#: only once the chain shows the payment can no longer move; pruned while it may, a
#: transfer of that payment would pay for a purchase that is gone.
UNPAID = (State.EXPIRED, State.CANCELLED)


@dataclass(frozen=True, slots=True)
class Change:
    challenge_id: str
    request_id: str
    before: State
    after: State
    reason: str

    def __str__(self) -> str:
        return f"{self.challenge_id}  {self.before.value} -> {self.after.value}  {self.reason}"


@dataclass
class PassReport:
    changes: list[Change] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    pruned: int = 0
    pruned_tasks: int = 0
    #: Refunds this pass took up (REQUESTED or SENDING before), as they ended up.
    refunds: list[RefundRecord] = field(default_factory=list)


#: What a page of each state is for, as ``x402srv reconcile`` shows its progress.
_PHASES = {
    State.SETTLING: "settling what requests left behind",
    State.PAID: "delivering paid grants",
    State.PENDING: "expiring unpaid challenges",
}


class Reconciler:
    """``progress(done, total, phase)``: records looked at so far (``x402srv reconcile``'s bar)."""

    def __init__(
        self,
        pipeline: AccessPipeline,
        options: ReconcilerConfig,
        *,
        holder: str | None = None,
        progress: Callable[[int, int | None, str | None], None] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.options = options
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._progress = progress

    def _note(self, report: PassReport, before: ChallengeRecord, after: ChallengeRecord) -> None:
        if after.state is not before.state:
            reason = after.history[-1].reason if after.history else ""
            change = Change(after.challenge_id, after.request_id, before.state, after.state, reason)
            report.changes.append(change)
            log.info(
                "reconciled challenge %s request %s: %s",
                change.challenge_id,
                fingerprint(change.request_id),
                change,
            )

    async def _pages(self, state: State, older_than: float) -> AsyncIterator[list[ChallengeRecord]]:
        """Every record in ``state`` last updated before ``older_than``, oldest first, once."""
        after: tuple[float, str] | None = None
        seen = 0
        while True:
            batch = await self.pipeline.store.list_challenges(
                states=[state],
                updated_before=older_than,
                after=after,
                limit=self.options.batch_size,
            )
            yield batch
            seen += len(batch)
            if self._progress is not None:
                self._progress(seen, None, _PHASES.get(state, state.value))
            if len(batch) < self.options.batch_size:
                return
            after = (batch[-1].updated_at, batch[-1].challenge_id)

    async def _each(
        self, state: State, older_than: float, step: Callable[[ChallengeRecord], Awaitable[None]]
    ) -> None:
        """``step`` for every record of ``_pages``, one after the other."""
        async for batch in self._pages(state, older_than):
            for record in batch:
                await step(record)

    async def _expire(
        self,
        report: PassReport,
        now: float,
        older_than: float,
        deliver: Callable[[ChallengeRecord], Awaitable[None]],
    ) -> None:
        """PENDING past expiresAt -> EXPIRED, a page at a time.

        The moves of a page are independent compare-and-sets, so they go
        together: a networked store's round trips overlap and PostgreSQL
        commits them in a few flushes, where one after the other each waited
        for its own (an unpaid flood leaves a great many of them). A record that
        kept a payment given back is asked about on the chain first: PAID if it
        moved (and delivered here), left PENDING while it still may
        (``x402srv.access.given_back``).
        """
        async for batch in self._pages(State.PENDING, older_than):
            due = [record for record in batch if record.expires_at <= now]
            afters = await asyncio.gather(*map(self.pipeline.expire, due), return_exceptions=True)
            for record, after in zip(due, afters, strict=True):
                if isinstance(after, BaseException):
                    raise after
                self._note(report, record, after)
                if after.state is State.PAID:
                    await deliver(after)
                elif kept_payment(after):  # the chain cannot tell yet
                    report.unresolved.append(record.challenge_id)

    async def run_once(self, *, grace_seconds: float | None = None) -> PassReport:
        report = PassReport()
        now = self.pipeline.clock()
        grace = self.options.grace_seconds if grace_seconds is None else grace_seconds

        async def settle_left_behind(record: ChallengeRecord) -> None:
            after = await self.pipeline.resolve(record, grace=grace)
            self._note(report, record, after)
            if after.state is State.PAID:
                await deliver(after)
            elif after.state is State.SETTLING:
                assert after.payment is not None
                if after.payment.lease_until + grace <= self.pipeline.clock():
                    report.unresolved.append(record.challenge_id)

        async def deliver(record: ChallengeRecord) -> None:
            try:
                after = await self.pipeline.deliver(record, wait=False)
            except CredentialPending:
                report.unresolved.append(record.challenge_id)
                return
            self._note(report, record, after)

        await self._each(State.SETTLING, now, settle_left_behind)
        await self._each(State.PAID, now, deliver)
        report.refunds = await refund_pass(self.pipeline)
        unpaid_cutoff = now - self.options.unpaid_retention_hours * 3600
        report.pruned += await self._prune(UNPAID, unpaid_cutoff)
        ttl = self.pipeline.config.server.challenge_ttl_seconds
        await self._expire(report, now, now - ttl, deliver)
        report.pruned += await self._prune(PAID_FOR, now - self.options.retention_days * 86_400)
        report.pruned_tasks = await self._prune_tasks(now)
        return report

    async def _prune(self, states: tuple[State, ...], cutoff: float) -> int:
        pruned = 0
        while True:
            if self._progress is not None:
                self._progress(pruned, None, "pruning old records")
            count = await self.pipeline.store.prune(
                states=states, updated_before=cutoff, limit=self.options.batch_size
            )
            pruned += count
            if count < self.options.batch_size:
                return pruned

    async def _prune_tasks(self, now: float) -> int:
        pruned = 0
        while True:
            count = await self.pipeline.store.prune_tasks(before=now, limit=self.options.batch_size)
            pruned += count
            if count < self.options.batch_size:
                return pruned

    async def run_exclusive(
        self, *, grace_seconds: float | None = None, wait_seconds: float = 0.0
    ) -> PassReport | None:
        """One pass under the store lease; None if another runner holds it (after waiting)."""
        ttl = max(60.0, self.options.interval_seconds * 2)
        deadline = self.pipeline.clock() + wait_seconds
        while True:
            lease = await self.pipeline.store.acquire_lease(
                LEASE_NAME, self.holder, ttl, self.pipeline.clock()
            )
            if lease is not None:
                break
            if self.pipeline.clock() >= deadline:
                return None
            await asyncio.sleep(0.5)
        try:
            started = self.pipeline.clock()
            report = await self.run_once(grace_seconds=grace_seconds)
            with contextlib.suppress(StoreUnavailable):
                await self._keep_summary(report, started)
            return report
        finally:
            with contextlib.suppress(StoreUnavailable):
                await self.pipeline.store.release_lease(lease, None)

    async def _keep_summary(self, report: PassReport, started: float) -> None:
        """The pass's summary, for the console; written by the lease holder only."""
        store = self.pipeline.store
        current = await store.get_task(STATUS_DOCUMENT)
        document = {
            "startedAt": started,
            "finishedAt": self.pipeline.clock(),
            "holder": self.holder,
            "changes": [
                {
                    "challengeId": c.challenge_id,
                    "from": c.before.value,
                    "to": c.after.value,
                    "reason": c.reason,
                }
                for c in report.changes[:MAX_LISTED]
            ],
            "changed": len(report.changes),
            "unresolved": report.unresolved[:MAX_LISTED],
            "unresolvedCount": len(report.unresolved),
            "pruned": report.pruned,
            "prunedTasks": report.pruned_tasks,
        }
        await store.save_task(
            STATUS_DOCUMENT,
            document,
            expect_version=current[1] if current is not None else None,
        )

    async def run_forever(self) -> None:
        """The server's background task; store outages are logged and retried next time."""
        while True:
            await asyncio.sleep(self.options.interval_seconds)
            try:
                report = await self.run_exclusive()
            except StoreUnavailable:
                log.warning("reconciler: store unavailable; will retry")
                continue
            except Exception:
                log.exception("reconciler pass failed; will retry")
                continue
            if report and (report.changes or report.pruned or report.pruned_tasks):
                log.info(
                    "reconciler pass: %d changed, %d unresolved, %d records and %d tasks pruned",
                    len(report.changes),
                    len(report.unresolved),
                    report.pruned,
                    report.pruned_tasks,
                )


async def last_pass(store: Store) -> dict[str, Any] | None:
    """The summary the last pass left (``None`` before the first one)."""
    stored = await store.get_task(STATUS_DOCUMENT)
    return stored[0] if stored is not None else None
