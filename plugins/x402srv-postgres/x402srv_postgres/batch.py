"""Group commit for challenge inserts: the creates that arrive while one is on the wire go next.

Creating a challenge is the one write every unpaid request makes, and with
PostgreSQL's default durability every transaction waits for its WAL flush.
One insert per request pays that flush, a pooled connection and a round trip
each; here the first create on an idle store goes out at once, alone, and the
creates that arrive meanwhile leave together as one multi-row ``INSERT``: one
statement, one commit, one flush for all of them. No timer: nobody waits for
company. The same idea as the sqlite store's group commit and the redis
plugin's coalescing of creates, on the event loop.

``send`` answers one outcome per item, an exception for an item that failed
alone; an exception it raises fails the whole batch. A caller cancelled before
its batch leaves is dropped from it; one cancelled later gets no answer (its
row was sent, and may be committed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")

Send = Callable[[list[Item]], Awaitable[Sequence[Outcome | BaseException]]]


class GroupCommit(Generic[Item, Outcome]):
    """At most one batch on the wire; whatever queued meanwhile is the next one."""

    def __init__(self, send: Send[Item, Outcome], *, max_batch: int) -> None:
        self._send = send
        self._max_batch = max_batch
        self._queue: list[tuple[Item, asyncio.Future[Outcome]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def submit(self, item: Item) -> Outcome:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._queue.append((item, future))
        if self._drain is None or self._drain.done():
            self._drain = loop.create_task(self._drain_queue())
        return await future

    async def _drain_queue(self) -> None:
        try:
            while self._queue:
                taken = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                batch = [(item, future) for item, future in taken if not future.done()]
                if batch:
                    await self._send_batch(batch)
        except asyncio.CancelledError:
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
        except Exception as exc:  # a bug, not an outage (``send`` answers those per item)
            outcomes = [exc] * len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
