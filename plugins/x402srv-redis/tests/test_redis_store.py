"""The Redis store runs the store contract against a real redis-server, plus its own checks."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer

from x402srv.config.models import Secret
from x402srv.interfaces import Store
from x402srv.testing import StoreContract


class TestRedisStore(StoreContract):
    durable = True

    @pytest.fixture
    async def store(self, redis_server: RedisServer, key_prefix: str) -> AsyncIterator[RedisStore]:
        store = RedisStore(Secret(redis_server.url), RedisOptions(key_prefix=key_prefix))
        await store.start()
        yield store
        await store.close()

    def another_store(self, store: Store) -> Store:
        assert isinstance(store, RedisStore)
        return RedisStore(store.url, store.options)

    def fresh_store(self, store: Store) -> Store:
        assert isinstance(store, RedisStore)
        options = store.options.model_copy(update={"key_prefix": f"fresh-{secrets.token_hex(6)}:"})
        return RedisStore(store.url, options)
