"""Tasks in the configured store, changed only by compare-and-set on their version.

Two messages on one task can be answered at once (by two workers or two
instances). Each folds its update into the task it read; when the store says
the version moved on, it reads the task again and folds the same update into
that (``outcomes.apply`` is pure), so no update is lost and ``completed`` is
never overwritten. Settlement itself is guarded by the pipeline's own
compare-and-set; this only keeps the task document consistent.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import Any, Final

from x402srv.a2a.documents import Purchase, TaskRecord, TaskState
from x402srv.a2a.jsonrpc import TASK_NOT_FOUND, RpcError
from x402srv.a2a.outcomes import Update, apply
from x402srv.errors import InternalError
from x402srv.interfaces import Clock, Store
from x402srv.server.logs import fingerprint

__all__ = ["TaskRepository"]

log = logging.getLogger("x402srv.a2a")

#: Rounds of read-fold-write one answer may lose to concurrent writers before giving up.
MAX_ROUNDS: Final = 16


def _is_task_id(task_id: str) -> bool:
    try:
        return str(uuid.UUID(task_id)) == task_id
    except ValueError:
        return False


class TaskRepository:
    """Every save also says when the store may prune the task (``Store.prune_tasks``):
    ``keep_unpaid`` seconds after its last change while nothing was paid for it (a
    "hello" costs the seller a stored task), ``keep_paid`` once a payment is being
    settled or has delivered a grant, as long as the purchase's own record.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        keep_unpaid: float = 6 * 3600,
        keep_paid: float = 30 * 86_400,
    ) -> None:
        self._store = store
        self._clock = clock
        self._keep_unpaid = keep_unpaid
        self._keep_paid = keep_paid

    def _prune_after(self, record: TaskRecord) -> float:
        paid = record.state in (TaskState.WORKING, TaskState.COMPLETED)
        return self._clock() + (self._keep_paid if paid else self._keep_unpaid)

    async def _save(self, record: TaskRecord, version: int | None) -> int | None:
        return await self._store.save_task(
            record.task_id,
            record.to_document(),
            expect_version=version,
            prune_after=self._prune_after(record),
        )

    async def create(self, record: TaskRecord) -> int:
        version = await self._save(record, None)
        if version is None:  # a random UUID collided: nothing sane to recover
            raise InternalError("could not store the new task")
        return version

    async def load(self, task_id: str) -> tuple[TaskRecord, int]:
        """The task and its version; -32001 for an id that names no task."""
        stored = await self._store.get_task(task_id) if _is_task_id(task_id) else None
        if stored is None:
            raise RpcError(TASK_NOT_FOUND, {"detail": "no task with this id on this agent"})
        document, version = stored
        return TaskRecord.from_document(document), version

    async def update(
        self,
        record: TaskRecord,
        version: int,
        update: Update,
        user: dict[str, Any] | None = None,
    ) -> tuple[TaskRecord, int]:
        """Fold ``update`` into the task (re-read on every lost race); the task as stored."""
        for _ in range(MAX_ROUNDS):
            changed = apply(record, update, self._clock(), user)
            if changed is None:
                return record, version
            written = await self._save(changed, version)
            if written is not None:
                return changed, written
            record, version = await self.load(record.task_id)
        raise self._gave_up(record)

    async def bind(
        self, record: TaskRecord, version: int, purchase: Purchase
    ) -> tuple[TaskRecord, int]:
        """Give a task that waits for a plan its purchase, before anything is paid for it.

        The purchase is stored first so that a payment made for it is always found
        from the task, even if this worker stops right after. A task already bound
        (another message won the race) keeps its own purchase.
        """
        for _ in range(MAX_ROUNDS):
            if record.purchase is not None:
                return record, version
            bound = replace(record, purchase=purchase)
            written = await self._save(bound, version)
            if written is not None:
                return bound, written
            record, version = await self.load(record.task_id)
        raise self._gave_up(record)

    @staticmethod
    def _gave_up(record: TaskRecord) -> InternalError:
        log.error(
            "a2a: task %s: gave up after %d concurrent updates",
            fingerprint(record.task_id),
            MAX_ROUNDS,
        )
        return InternalError("the task is changing too fast; ask again")
