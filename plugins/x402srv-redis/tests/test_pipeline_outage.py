"""The pipeline's answer when Redis goes away between settling and recording.

The multi-instance test restarts Redis under load and sees these cases now and
then; here each is pinned by ``x402srv.testing.OutageContract``: its settler
stops the real redis-server (SIGTERM by PID; the AOF keeps what was written)
after the claim, before the outcome is recorded.
"""

from __future__ import annotations

import pytest
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, StartRedis

from x402srv.config.models import Secret
from x402srv.testing import OutageContract


class TestRedisOutage(OutageContract):
    @pytest.fixture
    def store_server(self, start_redis: StartRedis) -> RedisServer:
        return start_redis(appendonly=True)

    @pytest.fixture
    def outage_store(self, store_server: RedisServer, key_prefix: str) -> RedisStore:
        return RedisStore(Secret(store_server.url), RedisOptions(key_prefix=key_prefix))
