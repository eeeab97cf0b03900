"""Group commit for the sqlite store's challenge inserts.

Creating a challenge is the one write every unpaid request makes, so under load
many are waiting at once. Instead of one thread hop and one commit each, the
callers queue their insert here and the store's thread takes everything queued
so far into one ``BEGIN IMMEDIATE ... COMMIT`` (``ops.create_challenges``),
then hands the results back to the event loop in one call. A commit costs the
same for one row or a hundred, and the loop and the store's thread wake each
other once per batch instead of twice per request.

Each insert keeps the semantics of ``Store.create_challenge``: it is decided on
its own, in call order, inside the batch's transaction (a second insert with a
requestId the batch already holds finds that record). If the transaction fails
as a whole (sqlite could not write), every insert of the batch fails with the
store's error and nothing of it is stored.

The queue is shared by the loop (``add``) and the store's thread (``take``); a
lock makes "queue it, and start a drain unless one is running" and "take a
batch, or declare the drain finished" atomic, so no insert is ever left queued
without a drain that will take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from x402srv.access.records import ChallengeRecord
from x402srv.interfaces import PaymentClaimed

__all__ = ["MAX_BATCH", "Created", "GroupCommit", "PendingInsert"]

#: Inserts committed in one transaction at most; the rest wait for the next one.
MAX_BATCH = 256

Created = tuple[ChallengeRecord, bool] | PaymentClaimed


@dataclass(frozen=True, slots=True)
class PendingInsert:
    """One caller's insert: the record, its row, and the future its caller awaits."""

    record: ChallengeRecord
    row: tuple[str, str, str, float, str | None, str]
    future: asyncio.Future[Created]


class GroupCommit:
    """The queue of pending inserts and whether a drain is scheduled for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[PendingInsert] = []
        self._draining = False

    def add(self, insert: PendingInsert) -> bool:
        """Queue ``insert``; True when the caller must schedule a drain (none is running)."""
        with self._lock:
            self._queue.append(insert)
            if self._draining:
                return False
            self._draining = True
            return True

    def take(self) -> list[PendingInsert]:
        """The next batch in call order; an empty list ends the drain (store's thread)."""
        with self._lock:
            batch = self._queue[:MAX_BATCH]
            del self._queue[:MAX_BATCH]
            if not batch:
                self._draining = False
            return batch

    def abandon(self) -> list[PendingInsert]:
        """Everything queued, when no drain can be scheduled any more (the store closed)."""
        with self._lock:
            batch, self._queue = self._queue, []
            self._draining = False
            return batch


def deliver(batch: Sequence[PendingInsert], outcomes: Sequence[Created | BaseException]) -> None:
    """Hand each outcome to its caller's loop: one call per loop for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Created], Any]]] = {}
    for insert, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(insert.future.get_loop(), []).append((insert.future, outcome))
    for loop, results in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, results)


def _resolve(results: list[tuple[asyncio.Future[Created], Any]]) -> None:
    for future, outcome in results:
        if future.done():  # the caller was cancelled; its insert stays committed
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def fail_all(batch: Sequence[PendingInsert], error: Callable[[], BaseException]) -> None:
    """Every insert of ``batch`` fails with a fresh ``error()``."""
    deliver(batch, [error() for _ in batch])
