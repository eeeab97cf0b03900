"""Fault injection in a real gateway process: the buyer leaves as the upstream's answer ends.

Python imports this module at start-up when its directory is on ``PYTHONPATH``
(``sitecustomize``); ``tests.support.faults.leaving_at_the_end`` sets both that and
``X402SRV_TEST_LEAVE_AFTER`` (an upstream's URL). For the answers of that upstream,
the handler that forwards one is cancelled right after the answer's last chunk
passed, as Sanic's ``connection_lost`` cancels it when the buyer's socket closes:
the cancellation lands at the handler's next await, wherever that is. A real
buyer who closes at that instant wins a race of a few loop turns at best, which
no test wins every time; this makes it land there every time. Nothing else in
the process is touched.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import httpx

_UPSTREAM = os.environ.get("X402SRV_TEST_LEAVE_AFTER", "")

if _UPSTREAM:
    _aiter_raw = httpx.Response.aiter_raw

    async def _leaving(self: httpx.Response, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        async for chunk in _aiter_raw(self, chunk_size):
            yield chunk
        task = asyncio.current_task()
        if task is not None and str(self.request.url).startswith(_UPSTREAM):
            task.cancel()  # (what connection_lost does, as the answer's last byte went out)

    httpx.Response.aiter_raw = _leaving  # type: ignore[method-assign]
