"""message/stream and tasks/resubscribe: a task's events, read from the store.

A stream starts with the Task, then sends each status the task goes through
(``status-update``) and its AccessGrant (``artifact-update``) until the task is
final or waits for the client (``input-required``), as A2A says. Everything
comes from the stored task and its log (see ``documents``), never from this
process's memory, so a stream on one worker follows a payment another worker is
settling, and a client that hung up and resubscribes (or calls tasks/get)
finds everything the payment led to.

The store is read every ``poll`` seconds; a payment settled by this worker
wakes its stream at once when it ends. A ``working`` task that nobody here is
settling (its worker stopped, or the outcome is unknown) is asked about again
every ``refresh`` seconds, as tasks/get would. A stream ends after ``limit``
seconds at the latest; the client can resubscribe.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

from x402srv.a2a.conversation import Conversation
from x402srv.a2a.documents import TaskRecord, TaskState
from x402srv.a2a.render import (
    STREAM_ENDS,
    artifact_event,
    artifacts,
    render_task,
    status_event,
    timeline,
)
from x402srv.a2a.repository import TaskRepository

__all__ = ["TaskStreams"]


class TaskStreams:
    def __init__(
        self,
        tasks: TaskRepository,
        conversation: Conversation,
        *,
        poll: float = 0.2,
        refresh: float = 2.0,
        limit: float = 300.0,
    ) -> None:
        self._tasks = tasks
        self._conversation = conversation
        self._poll = poll
        self._refresh = refresh
        self._limit = limit

    async def events(
        self,
        shown: TaskRecord,
        settling: asyncio.Task[TaskRecord] | None = None,
        history_length: int | None = None,
        *,
        ends: frozenset[TaskState] = STREAM_ENDS,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The Task as ``shown``, then what happens to it (0.3 JSON, one dict per event).

        The stream closes once the task is in one of ``ends``: final or waiting for
        the client by default; 1.0's SubscribeToTask passes the final states only.

        ``settling`` is the payment this worker is settling for the task: the
        stream does not end on the ``input-required`` the task still shows
        before that payment is decided.
        """
        yield render_task(shown, history_length)
        seen = {status["message"]["messageId"] for status in timeline(shown)}
        sent = {artifact["artifactId"] for artifact in artifacts(shown)}
        started = last_asked = time.monotonic()
        record, decided = shown, settling is None
        while not (decided and record.state in ends):
            if time.monotonic() - started >= self._limit:
                return
            await self._wait(settling)
            # Whether the payment was decided BEFORE this read: then the read shows its end.
            decided = settling is None or settling.done()
            record, version = await self._tasks.load(shown.task_id)
            if settling is not None and decided:
                settling.result()  # a payment that failed to settle: its error ends the stream
            elif (
                settling is None
                and record.state is TaskState.WORKING
                and time.monotonic() - last_asked >= self._refresh
            ):
                record = await self._conversation.refresh(record, version)
                last_asked = time.monotonic()
            fresh = [s for s in timeline(record) if s["message"]["messageId"] not in seen]
            granted = [a for a in artifacts(record) if a["artifactId"] not in sent]
            closing = decided and record.state in ends
            for n, status in enumerate(fresh, start=1):
                if n == len(fresh):  # the grant came with the latest status: just before it
                    for artifact in granted:
                        yield artifact_event(record, artifact)
                seen.add(status["message"]["messageId"])
                yield status_event(record, status, final=closing and n == len(fresh))
            if not fresh:
                for artifact in granted:
                    yield artifact_event(record, artifact)
            sent.update(artifact["artifactId"] for artifact in granted)

    async def _wait(self, settling: asyncio.Task[TaskRecord] | None) -> None:
        if settling is not None and not settling.done():
            await asyncio.wait({settling}, timeout=self._poll)
        else:
            await asyncio.sleep(self._poll)
