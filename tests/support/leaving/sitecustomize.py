"""Fault injection in a real gateway process: the buyer leaves at an instant no socket can hit.

Python imports this module at start-up when its directory is on ``PYTHONPATH``
(``sitecustomize``); ``tests.support.faults.leaving_at_the_end`` sets both that and
``X402SRV_TEST_LEAVE_AFTER`` (an upstream's URL). For the answers of that upstream,
the handler that forwards one is cancelled right after the answer's last chunk
was read, as Sanic's ``connection_lost`` cancels it when the buyer's socket closes:
the cancellation lands at the handler's next await, wherever that is (for a reader
that closes the answer itself, such as httpx's ``aiter_raw``, inside that close).
A real buyer who closes at that instant wins a race of a few loop turns at best,
which no test wins every time; this makes it land there every time. It sits under
every reader of an answer's body: httpx's response-bound stream (httpx 0.28), which
``aiter_raw``, ``aread`` and the gateway's own reader all iterate. Nothing else in
the process is touched.

``X402SRV_TEST_LEAVE_ON_CONNECT`` (an upstream's port, from
``tests.support.faults.leaving_on_connect``): the handler is cancelled as soon as
a new connection to that port is open, before the call's first byte goes out on
it (httpx's own pool kept such a connection for good). It sits under httpcore's
asyncio network backend, which every connection of the gateway's client opens
through.

``X402SRV_TEST_LEAVE_IN_SPEND`` (a gateway route's prefix, from
``tests.support.faults.leaving_in_spend``): for that route's calls, the handler is
cancelled just after the sqlite store's ``spend`` wrote the call's credits, while
the gateway still awaits it (a Postgres or Redis spend is a round trip long).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from httpx import _client

_UPSTREAM = os.environ.get("X402SRV_TEST_LEAVE_AFTER", "")
_ON_CONNECT = int(os.environ.get("X402SRV_TEST_LEAVE_ON_CONNECT", "0"))

if _UPSTREAM:
    _bound: Any = _client.BoundAsyncStream
    _chunks = _bound.__aiter__

    async def _leaving(self: Any) -> AsyncIterator[bytes]:
        async for chunk in _chunks(self):
            yield chunk
        task = asyncio.current_task()
        if task is not None and str(self._response.request.url).startswith(_UPSTREAM):
            task.cancel()  # (what connection_lost does, as the answer's last byte went out)

    _bound.__aiter__ = _leaving

if _ON_CONNECT:
    import httpcore

    _backend: Any = httpcore.AnyIOBackend
    _connect_tcp = _backend.connect_tcp

    async def _connected(self: Any, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        stream = await _connect_tcp(self, host, port, *args, **kwargs)
        task = asyncio.current_task()
        if task is not None and port == _ON_CONNECT:
            task.cancel()  # (what connection_lost does, the buyer gone as the connection opened)
        return stream

    _backend.connect_tcp = _connected

_IN_SPEND = os.environ.get("X402SRV_TEST_LEAVE_IN_SPEND", "")

if _IN_SPEND:
    import contextvars

    from x402srv.default_plugins.sqlite.store import SqliteStore
    from x402srv.gateway.decide import Gateway

    _handler: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar(
        "x402srv_test_handler", default=None
    )
    _decide = Gateway.decide
    _spend = SqliteStore.spend

    async def _deciding(self: Any, route: Any, **kwargs: Any) -> Any:
        if route.prefix == _IN_SPEND:
            _handler.set(asyncio.current_task())
        return await _decide(self, route, **kwargs)

    async def _spending(self: Any, *args: Any, **kwargs: Any) -> Any:
        spent = await _spend(self, *args, **kwargs)
        handler = _handler.get()
        if handler is not None:
            handler.cancel()  # (the buyer gone while its handler awaited this spend)
            await asyncio.sleep(0)
        return spent

    Gateway.decide = _deciding  # type: ignore[method-assign]
    SqliteStore.spend = _spending  # type: ignore[method-assign]
