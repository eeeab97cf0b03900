"""One real ``redis-server`` for the store tests, started on a free port and stopped by PID.

Tests never share keys: each store gets its own random key prefix, which is
also how several sellers share one Redis in production. Tests that stop,
restart or reconfigure a server start their own (``start_redis``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from x402srv_redis.testing import RedisServer, StartRedis, redis_server_binary


@pytest.fixture(scope="session")
def start_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartRedis]:
    """``start_redis(**fields) -> RedisServer``: any ``RedisServer`` field but ``directory``."""
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (set X402SRV_REDIS_SERVER to its path)")
    started: list[RedisServer] = []

    def start(**kwargs: Any) -> RedisServer:
        server = RedisServer(tmp_path_factory.mktemp("redis"), **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(start_redis: StartRedis) -> RedisServer:
    return start_redis()


@pytest.fixture
def key_prefix() -> str:
    return f"test:{secrets.token_hex(6)}:"
