"""Coalescing: the calls that arrive while one batch is on the wire go out together next.

For a store whose per-call cost (a pooled connection, a round trip, a commit)
dominates the unpaid path: the first call on an idle store goes out at once, as
a batch of one; calls that arrive while a batch is on the wire queue up and
leave together, as one command or statement, as soon as it is answered. No
timer: nobody waits for company, and under load each round trip carries
everything that arrived during the last one. The Redis plugin sends a batch of
challenge creates as one Lua call, the PostgreSQL plugin as one multi-row
``INSERT`` (one commit, one WAL flush); the sqlite store does the same on its
thread (``default_plugins.sqlite_batch``).

``send`` decides each item on its own and answers one outcome per item, an
exception for an item that failed alone; an exception it raises fails the
whole batch. A caller cancelled before its batch leaves is dropped from it;
one cancelled later gets no answer (its item was sent and may have been
applied, as a reply lost with a dropped connection would be).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")

Send = Callable[[list[Item]], Awaitable[Sequence[Outcome | BaseException]]]


class Coalescer(Generic[Item, Outcome]):
    """At most one batch on the wire; whatever queued meanwhile is the next one."""

    def __init__(self, send: Send[Item, Outcome], *, max_batch: int) -> None:
        self._send = send
        self._max_batch = max_batch
        self._queue: list[tuple[Item, asyncio.Future[Outcome]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Outcome:
        """``item``'s outcome, sent in the next batch (at once if none is on the wire)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._queue.append((item, future))
        if self._drain is None or self._drain.done():
            self._drain = loop.create_task(self._drain_queue())
        return await future

    async def drained(self) -> None:
        """Return once everything submitted so far has its outcome (for closing)."""
        while self._drain is not None and not self._drain.done():
            await asyncio.wait({self._drain})  # never raises the drain's own end

    async def _drain_queue(self) -> None:
        try:
            while self._queue:
                taken = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                batch = [(item, future) for item, future in taken if not future.done()]
                if batch:
                    await self._send_batch(batch)
        except asyncio.CancelledError:
            # The loop is going away: nobody will send what is still queued.
            queued, self._queue = self._queue, []
            for _, future in queued:
                future.cancel()
            raise

    async def _send_batch(self, batch: list[tuple[Item, asyncio.Future[Outcome]]]) -> None:
        try:
            outcomes = await self._send([item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # a bug, not an outage: every caller sees it
            outcomes = [exc] * len(batch)
        if len(outcomes) != len(batch):
            wrong = RuntimeError(f"{len(outcomes)} outcomes for a batch of {len(batch)}")
            outcomes = [wrong] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
