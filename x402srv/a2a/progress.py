"""Settlement progress of the A2A payments this process runs, read from the pipeline.

The pipeline calls its observers with the challenge record after every
transition it applies (``AccessPipeline.observers``). While an A2A payment is
being settled here, the record's steps are queued for it: SETTLING (the payment
passed every check and is claimed), then SETTLING with the transaction hash as
soon as the settler broadcast it. A settler that learns the hash with its
confirmation (a facilitator answers once its transaction is mined) notes none:
then the move to PAID shows the hash instead, in the same step. The task writes
each step into its log, so a stream on any worker shows them, however fast the
chain was.

Only this process's settlements are seen; that is enough, because a payment is
always settled by the worker that received it, and everything it learns is
stored on the task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from x402srv.a2a.outcomes import Update, settling
from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import ChallengeRecord, State

__all__ = ["SettlementWatch", "step_of"]


def step_of(record: ChallengeRecord) -> Update | None:
    """What a buyer is told about a challenge in this state (None: nothing new to tell)."""
    if record.payment is None:
        return None
    if record.state is State.SETTLING:
        return settling(record.payment.broadcast_tx_hash)
    if (
        record.state is State.PAID
        and record.payment.broadcast_tx_hash is None
        and len(record.history) >= 2
        and record.history[-2].state is State.SETTLING  # the move to PAID, not a later one
    ):
        return settling(record.tx_hash, mined=True)
    return None


class SettlementWatch:
    """Queues the progress of the payments being settled here, by requestId."""

    def __init__(self, pipeline: AccessPipeline) -> None:
        self._queues: dict[str, set[asyncio.Queue[Update]]] = {}
        pipeline.observers.append(self._observe)

    def _observe(self, record: ChallengeRecord) -> None:
        queues = self._queues.get(record.request_id)
        if not queues:
            return
        step = step_of(record)
        if step is not None:
            for queue in queues:
                queue.put_nowait(step)

    @contextmanager
    def watch(self, request_id: str) -> Iterator[asyncio.Queue[Update]]:
        """The steps of ``request_id``'s settlement while the ``with`` block runs."""
        queue: asyncio.Queue[Update] = asyncio.Queue()
        self._queues.setdefault(request_id, set()).add(queue)
        try:
            yield queue
        finally:
            queues = self._queues[request_id]
            queues.discard(queue)
            if not queues:
                del self._queues[request_id]
