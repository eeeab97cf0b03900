"""Work that runs to its end whatever happens to whoever started it.

Sanic cancels a request's handler when its client goes away, at whatever the
handler awaits then. Some of that work must not stop half-way: a store step that
gives a buyer's credits back, the close that hands an upstream connection back
to the pool. ``detached`` starts it in a task of its own and keeps the task
until it is done (asyncio holds only weak references to tasks); ``to_the_end``
awaits it shielded, so the caller's cancellation stops the waiting, not the work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["detached", "to_the_end"]

T = TypeVar("T")

#: The tasks ``detached`` started that are not done yet.
_running: set[asyncio.Task[Any]] = set()


def detached(work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``work`` in a task of its own, started now and kept until it is done."""
    task = asyncio.ensure_future(work)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


async def to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """``work``'s outcome; cancelled meanwhile, the caller stops waiting and ``work`` goes on."""
    return await asyncio.shield(detached(work))
