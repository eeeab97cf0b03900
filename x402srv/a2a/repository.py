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
from typing import Final

from ..errors import InternalError
from ..interfaces import Clock, Store
from .documents import TaskRecord
from .jsonrpc import TASK_NOT_FOUND, RpcError
from .outcomes import Update, apply

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
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def create(self, record: TaskRecord) -> None:
        version = await self._store.save_task(
            record.task_id, record.to_document(), expect_version=None
        )
        if version is None:  # a random UUID collided: nothing sane to recover
            raise InternalError("could not store the new task")

    async def load(self, task_id: str) -> tuple[TaskRecord, int]:
        """The task and its version; -32001 for an id that names no task."""
        stored = await self._store.get_task(task_id) if _is_task_id(task_id) else None
        if stored is None:
            raise RpcError(TASK_NOT_FOUND, {"detail": "no task with this id on this agent"})
        document, version = stored
        return TaskRecord.from_document(document), version

    async def update(self, record: TaskRecord, version: int, update: Update) -> TaskRecord:
        """Fold ``update`` into the task (re-read on every lost race); the task as stored."""
        for _ in range(MAX_ROUNDS):
            changed = apply(record, update, self._clock())
            if changed is None:
                return record
            written = await self._store.save_task(
                record.task_id, changed.to_document(), expect_version=version
            )
            if written is not None:
                return changed
            record, version = await self.load(record.task_id)
        log.error("task %s: gave up after %d concurrent updates", record.task_id, MAX_ROUNDS)
        raise InternalError("the task is changing too fast; ask again")
