"""Group commit for the sqlite store's hottest writes: challenge inserts, credit steps.

Creating a challenge is the one write every unpaid request makes, and a
spend (and, for a call charged by use, a settle) the one every metered call
makes, so under load many are waiting at once. Instead of one thread hop and one commit each, the
callers queue their insert here and the store's thread takes everything queued
so far into one ``BEGIN IMMEDIATE ... COMMIT`` (``ops.create_challenges``),
then hands the results back to the event loop in one call. A commit costs the
same for one row or a hundred, and the loop and the store's thread wake each
other once per batch instead of twice per request.

The inserts and the credit steps (``spend``, ``refund``, ``settle``) queue
apart (``GroupCommit`` each), and each batch is one kind.

Each insert keeps the semantics of ``Store.create_challenge``: it is decided on
its own, in call order, inside the batch's transaction (a second insert with a
requestId the batch already holds finds that record). If the transaction fails
as a whole (sqlite could not write), every insert of the batch fails with the
store's error and nothing of it is stored. Credit steps likewise run one
after the other in call order inside the batch's transaction, each deciding on
the account as the steps before it left it (``credits.in_one_transaction``), so
concurrent spends still never take the last credit twice; a step refused for
its arguments (``ValueError``, raised before it writes anything) fails alone.
A caller hears its outcome only once the whole batch is committed: a
reservation is durable before its call is forwarded, a settlement before the
answer that shows the balance after it ends. A spend whose caller was cancelled
before the batch took it is not run (nothing reserved for nobody); refunds
and settlements always run (they give credits back).

A caller may run its credit step itself instead (``try_inline``): only while
nothing is queued and no drain runs, and a drain it held back meanwhile starts
when it is done (``end_inline``).

The queue is shared by the loop (``add``) and the store's thread (``take``); a
lock makes "queue it, and start a drain unless one is running" and "take a
batch, or declare the drain finished" atomic, so no insert is ever left queued
without a drain that will take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from x402srv.access.records import ChallengeRecord
from x402srv.interfaces import PaymentClaimed

__all__ = [
    "MAX_BATCH",
    "Created",
    "GroupCommit",
    "Pending",
    "PendingInsert",
    "PendingStep",
    "deliver",
    "fail_all",
]

#: Inserts committed in one transaction at most; the rest wait for the next one.
MAX_BATCH = 256

Created = tuple[ChallengeRecord, bool] | PaymentClaimed


@dataclass(frozen=True, slots=True)
class PendingInsert:
    """One caller's insert: the record, its row, and the future its caller awaits."""

    record: ChallengeRecord
    row: tuple[str, str, str, float, str | None, str]
    future: asyncio.Future[Created]


@dataclass(frozen=True, slots=True)
class PendingStep:
    """One caller's credit step: what it runs on the connection, and the future it awaits.

    ``skip_if_cancelled``: not run at all when its caller was cancelled before
    the batch took it (a spend).
    """

    op: str
    step: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future[Any]
    skip_if_cancelled: bool = False


class Pending(Protocol):
    """What a queue holds: anything with the future its caller awaits."""

    @property
    def future(self) -> asyncio.Future[Any]: ...


P = TypeVar("P", bound=Pending)


class GroupCommit(Generic[P]):
    """The queue of pending writes of one kind and whether a drain is scheduled for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[P] = []
        self._draining = False

    def add(self, insert: P) -> bool:
        """Queue ``insert``; True when the caller must schedule a drain (none is running)."""
        with self._lock:
            self._queue.append(insert)
            if self._draining:
                return False
            self._draining = True
            return True

    def submit(
        self,
        pending: P,
        executor: Executor,
        drain: Callable[[], None],
        error: Callable[[], BaseException],
    ) -> None:
        """Queue ``pending`` and start ``drain`` on ``executor`` unless one is running.

        If the executor no longer takes work (the store closed meanwhile), everything
        queued fails with a fresh ``error()``.
        """
        if self.add(pending):
            self._start_drain(executor, drain, error)

    def try_inline(self) -> bool:
        """Whether the caller may run its write itself, now: nothing queued, no drain running.

        True marks a drain as running (the caller's), so writes queued meanwhile
        wait for ``end_inline`` to start theirs.
        """
        with self._lock:
            if self._draining or self._queue:
                return False
            self._draining = True
            return True

    def end_inline(
        self, executor: Executor, drain: Callable[[], None], error: Callable[[], BaseException]
    ) -> None:
        """The caller's own write is over: start a drain for what was queued meanwhile."""
        with self._lock:
            if not self._queue:
                self._draining = False
                return
        self._start_drain(executor, drain, error)

    def _start_drain(
        self, executor: Executor, drain: Callable[[], None], error: Callable[[], BaseException]
    ) -> None:
        """``drain`` on ``executor``; if it no longer takes work, everything queued fails."""
        try:
            executor.submit(drain)
        except RuntimeError:
            fail_all(self.abandon(), error)

    def take(self) -> list[P]:
        """The next batch in call order; an empty list ends the drain (store's thread)."""
        with self._lock:
            batch = self._queue[:MAX_BATCH]
            del self._queue[:MAX_BATCH]
            if not batch:
                self._draining = False
            return batch

    def abandon(self) -> list[P]:
        """Everything queued, when no drain can be scheduled any more (the store closed)."""
        with self._lock:
            batch, self._queue = self._queue, []
            self._draining = False
            return batch


def deliver(batch: Sequence[Pending], outcomes: Sequence[object]) -> None:
    """Hand each outcome to its caller's loop: one call per loop for the whole batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
    for insert, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(insert.future.get_loop(), []).append((insert.future, outcome))
    for loop, results in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits any more
            loop.call_soon_threadsafe(_resolve, results)


def _resolve(results: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, outcome in results:
        if future.done():  # the caller was cancelled; its write stays committed
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)


def fail_all(batch: Sequence[Pending], error: Callable[[], BaseException]) -> None:
    """Every write of ``batch`` fails with a fresh ``error()``."""
    deliver(batch, [error() for _ in batch])
