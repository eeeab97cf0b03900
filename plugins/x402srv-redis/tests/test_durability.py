"""What each persistence setting keeps, said at start-up, and shown with real crashes.

Every test starts its own redis-server with the setting it is about. The crash
tests kill the server with SIGKILL after the store acknowledged a write and
start it again on the same directory: with ``appendfsync always`` the write is
there, without an AOF it is gone (what the start-up warning says). Under
``everysec`` whether it survives depends on the disk's timing, so that row is
checked for its warning only.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, StartRedis

from x402srv.access.records import State
from x402srv.config.models import Secret
from x402srv.errors import ConfigError
from x402srv.interfaces import TransitionApplied
from x402srv.testing.builders import make_key, make_record
from x402srv.testing.store_contract import settling


def _crash_and_start(server: RedisServer) -> None:
    """SIGKILL (no orderly flush), then the same port and directory again.

    In a thread, as in a server whose event loop runs on meanwhile: the store's
    pooled connections see their end and are replaced before the next command.
    """
    server.kill()
    server.start()


async def _started(url: str, **options: object) -> RedisStore:
    store = RedisStore(Secret(url), RedisOptions.model_validate(options))
    await store.start()
    return store


@pytest.mark.parametrize(
    ("appendonly", "appendfsync", "warning"),
    [
        (False, "everysec", "appendonly is off"),
        (True, "no", "appendfsync is no"),
        (True, "everysec", "appendfsync is everysec"),
        (True, "always", None),
    ],
)
async def test_start_up_says_what_a_crash_can_lose(
    start_redis: StartRedis,
    caplog: pytest.LogCaptureFixture,
    appendonly: bool,
    appendfsync: str,
    warning: str | None,
) -> None:
    server = start_redis(appendonly=appendonly, appendfsync=appendfsync)
    with caplog.at_level(logging.INFO, logger="x402srv_redis"):
        store = await _started(server.url)
    await store.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warning is None:
        assert warnings == []
        assert "no crash of Redis or its host loses an acknowledged write" in caplog.text
    else:
        assert len(warnings) == 1
        assert warning in warnings[0]
        assert "appendfsync always" in warnings[0]  # what to do about it
        assert str(server.port) in warnings[0]  # which server


async def test_require_durable_refuses_a_server_that_can_lose_claims(
    start_redis: StartRedis,
) -> None:
    server = start_redis(appendonly=True, appendfsync="everysec")
    with pytest.raises(ConfigError) as caught:
        await _started(server.url, require_durable=True)
    assert caught.value.path == "store.redis.require_durable"
    assert "everysec" in str(caught.value)
    durable = start_redis(appendonly=True, appendfsync="always")
    store = await _started(durable.url, require_durable=True)
    try:
        record = make_record()
        assert await store.create_challenge(record) == (record, True)
    finally:
        await store.close()


async def test_a_server_that_hides_config_is_unchecked_not_assumed_durable(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """A managed Redis often renames or disables CONFIG: say it could not be checked."""
    server = start_redis(
        appendonly=True, appendfsync="always", directives=("--rename-command", "CONFIG", "")
    )
    with caplog.at_level(logging.WARNING, logger="x402srv_redis"):
        store = await _started(server.url)
    try:
        assert "could not read the server's persistence settings" in caplog.text
        record = make_record()
        assert await store.create_challenge(record) == (record, True)  # it still serves
    finally:
        await store.close()
    with pytest.raises(ConfigError, match="could not read"):
        await _started(server.url, require_durable=True)


async def test_require_durable_cannot_check_a_server_that_is_down(
    start_redis: StartRedis,
) -> None:
    server = start_redis(appendonly=True, appendfsync="always")
    server.stop()
    with pytest.raises(ConfigError, match="could not check"):
        await _started(server.url, require_durable=True, connect_timeout_seconds=1)


async def test_without_an_aof_a_crash_loses_acknowledged_claims(start_redis: StartRedis) -> None:
    """What the warning for ``appendonly no`` means, shown."""
    server = start_redis(appendonly=False)
    store = await _started(server.url)
    try:
        record, key = make_record(), make_key()
        await store.create_challenge(record)
        assert isinstance(await store.transition(settling(record, key)), TransitionApplied)
        await asyncio.to_thread(_crash_and_start, server)
        assert await store.get_challenge(record.challenge_id) is None
        assert await store.get_by_payment(key) is None
    finally:
        await store.close()


async def test_with_appendfsync_always_a_crash_keeps_every_acknowledged_write(
    start_redis: StartRedis,
) -> None:
    server = start_redis(appendonly=True, appendfsync="always")
    store = await _started(server.url, require_durable=True)
    try:
        records = [make_record() for _ in range(20)]
        keys = [make_key() for _ in records]
        for record in records:
            await store.create_challenge(record)
        for record, key in zip(records, keys, strict=True):
            assert isinstance(await store.transition(settling(record, key)), TransitionApplied)
        await asyncio.to_thread(_crash_and_start, server)  # right after the last reply
        for record, key in zip(records, keys, strict=True):
            found = await store.get_by_payment(key)
            assert found is not None
            assert (found.challenge_id, found.state) == (record.challenge_id, State.SETTLING)
    finally:
        await store.close()
