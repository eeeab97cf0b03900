"""A connection that closes under a command is a store outage (503), also under uvloop.

The Redis plugin met uvloop's ``RuntimeError: unable to perform operation on
<TCPTransport closed=True ...>; the handler is closed`` (a write on a transport
closed under redis-py, which did not check), and ``converted`` now maps it to a 503.
asyncpg does not meet it: uvloop tells the protocol (``connection_lost``) before it
closes the handle, asyncpg marks itself closing there, and every operation checks
that first (``InterfaceError``, one of ``DatabaseErrors``). This pins that with a
real server and a real uvloop loop (the tests otherwise run on asyncio's own loop,
while Sanic serves on uvloop): the pooled connection's transport is closed, as a
server going away closes it, and the next store call is a 503, never a RuntimeError.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
import uvloop
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.testing import PostgresServer

from x402srv.errors import StoreUnavailable
from x402srv.plugin import Secret


async def _closed_under_a_command(dsn: str, schema: str) -> StoreUnavailable | None:
    options = PostgresOptions(dsn=Secret(dsn), schema=schema, pool_size=1)
    store = PostgresStore(options.dsn, options)
    await store.migrate()
    await store.start()
    try:
        await store.ping()  # the pool's one connection is open and idle now
        pool = store._pool
        assert pool is not None
        async with pool.acquire() as conn:
            raw = cast(Any, conn)._con  # (asyncpg's pool proxy: the connection it holds)
        raw._transport.close()  # the handler is closed; asyncpg hears of it next iteration
        try:
            await store.ping()
        except StoreUnavailable as exc:
            return exc
        return None
    finally:
        await store.close()


def test_a_connection_closed_under_a_command_is_a_store_outage(
    postgres_server: PostgresServer, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        raised = runner.run(_closed_under_a_command(postgres_server.dsn(), postgres_schema))

    assert raised is not None and raised.status == 503
    assert "ping failed" in caplog.text
    assert postgres_server.dsn().split("@")[0] not in caplog.text  # (user and password)
