"""What only a real Redis shows: TTLs, prefixes, credentials, TLS, outages and their end.

Every test here that stops, pauses or reconfigures a server starts its own, so
the session's server stays clean for the contract suite.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, StartRedis, make_tls_files

from x402srv.access.records import State
from x402srv.config.models import Secret
from x402srv.errors import ConfigError, StoreUnavailable
from x402srv.interfaces import TransitionApplied
from x402srv.testing.builders import BASE_TIME, make_key, make_record, new_tx_hash
from x402srv.testing.store_contract import paid, settling

DAY = 86_400


async def _open(url: str, **options: object) -> RedisStore:
    store = RedisStore(Secret(url), RedisOptions.model_validate(options))
    await store.start()
    return store


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A plain client to look at what the store wrote."""
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


def _assert_hidden(exc: BaseException, *secrets_: str) -> None:
    """What a client could see: a 503 problem with Retry-After, no URL, no chained error."""
    assert isinstance(exc, StoreUnavailable)
    problem = exc.to_problem()
    assert problem["status"] == 503
    assert problem["code"] == "STORE_UNAVAILABLE"
    assert exc.headers()["Retry-After"] == "2"
    assert exc.__suppress_context__
    for secret in secrets_:
        assert secret not in str(problem)


# ------------------------------------------------------------ keys and TTLs


async def test_every_record_key_expires_with_the_record(
    redis_server: RedisServer, raw: aioredis.Redis, key_prefix: str
) -> None:
    store = await _open(redis_server.url, key_prefix=key_prefix, record_ttl_seconds=10 * DAY)
    try:
        record, key, tx = make_record(), make_key(), new_tx_hash()
        await store.create_challenge(record)
        assert isinstance(await store.transition(settling(record, key)), TransitionApplied)
        assert isinstance(await store.transition(paid(record, tx)), TransitionApplied)
        await store.save_task("task-1", {"status": "working"}, expect_version=None)
        lease = await store.acquire_lease("gas", "w1", 30, BASE_TIME)
        assert lease is not None

        expiring = [
            f"{key_prefix}c:{record.challenge_id}",
            f"{key_prefix}rid:{record.request_id}",
            f"{key_prefix}pay:{key}",
            f"{key_prefix}tx:{tx}",
            f"{key_prefix}claims:{record.challenge_id}",
            f"{key_prefix}task:task-1",
            f"{key_prefix}by-payer:0x{'ab' * 20}",  # the payer ``paid`` records
        ]
        for name in expiring:
            assert 10 * DAY - 5 <= await raw.ttl(name) <= 10 * DAY, name
        # Leases keep their fence forever; the listing sets lose members only to prune.
        for name in (f"{key_prefix}lease:gas", f"{key_prefix}by-updated"):
            assert await raw.ttl(name) == -1, name
        everything = sorted([k async for k in raw.scan_iter(match=f"{key_prefix}*")])
        assert everything == sorted(
            [
                *expiring,
                f"{key_prefix}lease:gas",
                f"{key_prefix}by-updated",
                f"{key_prefix}by-state:PAID",
            ]
        )
    finally:
        await store.close()


async def test_a_grants_credit_keys_expire_at_its_keep_until(
    redis_server: RedisServer, raw: aioredis.Redis, key_prefix: str
) -> None:
    """Credits live as long as the grant's token (plus a margin), by the caller's clock."""
    store = await _open(redis_server.url, key_prefix=key_prefix)
    try:
        await store.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 2 * DAY)
        await store.spend("g", 1, now=BASE_TIME + DAY, keep_until=BASE_TIME + DAY + 60)
        names = [f"{key_prefix}cr:g", f"{key_prefix}cr:g:k", f"{key_prefix}cr:g:u"]
        for name in names:
            assert DAY - 5 <= await raw.ttl(name) <= DAY, name
        everything = sorted([k async for k in raw.scan_iter(match=f"{key_prefix}*")])
        assert everything == sorted(names)
    finally:
        await store.close()


async def test_a_record_whose_ttl_ran_out_is_gone_everywhere(
    redis_server: RedisServer, raw: aioredis.Redis, key_prefix: str
) -> None:
    """Expiry by TTL (simulated by deleting what TTL deletes) leaves no ghost in listings."""
    store = await _open(redis_server.url, key_prefix=key_prefix)
    try:
        gone, kept = make_record(state=State.EXPIRED), make_record(at=BASE_TIME + 5)
        await store.create_challenge(gone, claim_payment=make_key())
        await store.create_challenge(kept)
        await raw.delete(
            f"{key_prefix}c:{gone.challenge_id}",
            f"{key_prefix}rid:{gone.request_id}",
            f"{key_prefix}claims:{gone.challenge_id}",
        )
        assert await store.list_challenges() == [kept]
        assert await store.list_challenges(states=[State.EXPIRED]) == []
        assert await store.get_by_request_id(gone.request_id) is None
        assert await store.prune(states=[State.EXPIRED], updated_before=BASE_TIME + 100) == 0
        assert await raw.zcard(f"{key_prefix}by-updated") == 1  # the ghost left the sets
        assert await raw.exists(f"{key_prefix}by-state:EXPIRED") == 0
    finally:
        await store.close()


async def test_prunable_tasks_keep_their_ttl_and_expired_ones_leave_the_set(
    redis_server: RedisServer, raw: aioredis.Redis, key_prefix: str
) -> None:
    store = await _open(redis_server.url, key_prefix=key_prefix, record_ttl_seconds=10 * DAY)
    try:
        for task_id in ("a", "b", "c"):
            await store.save_task(task_id, {}, expect_version=None, prune_after=BASE_TIME)
        assert 10 * DAY - 5 <= await raw.ttl(f"{key_prefix}task:a") <= 10 * DAY
        assert await raw.ttl(f"{key_prefix}tasks-by-prune") == -1
        await raw.delete(f"{key_prefix}task:a", f"{key_prefix}task:b")  # as their TTL would
        # The two expired ones do not count against the limit: "c" is still pruned.
        assert await store.prune_tasks(before=BASE_TIME + 1, limit=1) == 1
        assert await store.get_task("c") is None
        assert await raw.exists(f"{key_prefix}tasks-by-prune") == 0
    finally:
        await store.close()


async def test_hit_counters_expire_with_their_window_by_the_callers_clock(
    redis_server: RedisServer, raw: aioredis.Redis, key_prefix: str
) -> None:
    """The TTL is ``window_end - now``: a counter never outlives its window, whatever
    Redis's own clock says (the callers' clock is years away from it here)."""
    store = await _open(redis_server.url, key_prefix=key_prefix)
    try:
        hits = {"unpaid:203.0.113.7:1": 1}
        assert await store.count_hits(hits, window_end=BASE_TIME + 60, now=BASE_TIME) == hits
        name = f"{key_prefix}hits:unpaid:203.0.113.7:1"
        assert 59_000 < await raw.pttl(name) <= 60_000
        assert await raw.hgetall(name) == {"n": "1", "end": repr(BASE_TIME + 60)}
        late = {"unpaid:203.0.113.7:0": 1}  # a window that already ended: counted, not kept
        assert await store.count_hits(late, window_end=BASE_TIME, now=BASE_TIME + 1) == late
        assert await raw.pttl(f"{key_prefix}hits:unpaid:203.0.113.7:0") in (-2, 0, 1)  # <= 1 ms
    finally:
        await store.close()


async def test_prefixes_isolate_sellers_on_one_redis(redis_server: RedisServer) -> None:
    one = await _open(redis_server.url, key_prefix=f"shop-a-{secrets.token_hex(4)}:")
    two = await _open(redis_server.url, key_prefix=f"shop-b-{secrets.token_hex(4)}:")
    try:
        record, key, tx = make_record(), make_key(), new_tx_hash()
        await one.create_challenge(record, claim_payment=key)
        assert await two.get_challenge(record.challenge_id) is None
        assert await two.get_by_request_id(record.request_id) is None
        assert await two.get_by_payment(key) is None
        assert await two.list_challenges() == []
        same_request = make_record(request_id=record.request_id)
        assert await two.create_challenge(same_request, claim_payment=key) == (same_request, True)
        for store in (one, two):
            mine = await store.get_by_request_id(record.request_id)
            assert mine is not None
            assert isinstance(await store.transition(settling(mine)), TransitionApplied)
            assert isinstance(await store.transition(paid(mine, tx)), TransitionApplied)
            lease = await store.acquire_lease("gas", "w", 30, BASE_TIME)
            assert lease is not None
            assert lease.fence == 1
        assert await one.prune(states=[State.PAID], updated_before=BASE_TIME + 100) == 1
        assert await two.get_by_tx_hash(tx) == await two.get_by_request_id(record.request_id)
    finally:
        await one.close()
        await two.close()


# ------------------------------------------------------------ credentials and TLS


async def test_password_urls(start_redis: StartRedis, caplog: pytest.LogCaptureFixture) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    server = start_redis(password=password)
    store = await _open(server.url)
    try:
        record = make_record()
        await store.create_challenge(record)
        assert await store.get_challenge(record.challenge_id) == record
    finally:
        await store.close()
    wrong = server.url.replace(password, "not-the-password")
    for url in (wrong, f"redis://127.0.0.1:{server.port}/0"):
        with caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as caught:
            await _open(url)
        assert caught.value.path == "store.url"
        assert "not-the-password" not in str(caught.value)
    assert password not in caplog.text
    assert "not-the-password" not in caplog.text


async def test_rediss_with_a_private_ca(start_redis: StartRedis, tmp_path: Path) -> None:
    if shutil.which("openssl") is None:  # the only way here to make a CA a real server uses
        pytest.skip("openssl is not installed: no certificate for a TLS redis-server")
    tls = make_tls_files(tmp_path / "tls")
    password = "pw-" + secrets.token_urlsafe(12)
    server = start_redis(tls=tls, password=password)
    assert server.url.startswith(f"rediss://:{password}@")
    store = await _open(server.url, tls_ca_file=str(tls.ca))
    try:
        record = make_record()
        await store.create_challenge(record)
        assert await store.get_challenge(record.challenge_id) == record
    finally:
        await store.close()
    # Without the CA the server's certificate is not trusted: an outage, never plain text.
    untrusting = await _open(server.url)
    try:
        with pytest.raises(StoreUnavailable):
            await untrusting.get_challenge(record.challenge_id)
    finally:
        await untrusting.close()


# ------------------------------------------------------------ outages


async def test_a_restart_is_an_outage_that_ends_by_itself(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    password = "pw-" + secrets.token_urlsafe(12)
    server = start_redis(password=password, appendonly=True)
    store = await _open(server.url, socket_timeout_seconds=1, connect_timeout_seconds=1)
    try:
        record = make_record()
        await store.create_challenge(record)
        server.stop()
        with caplog.at_level(logging.ERROR, logger="x402srv_redis"):
            for operation in (
                store.get_challenge(record.challenge_id),
                store.create_challenge(make_record()),
                store.transition(settling(record)),
                store.acquire_lease("gas", "w", 30, BASE_TIME),
                store.ping(),
            ):
                with pytest.raises(StoreUnavailable) as caught:
                    await operation
                _assert_hidden(caught.value, password, str(server.port))
        assert "ConnectionError" in caplog.text
        assert password not in caplog.text
        server.start()  # same port, same directory: the AOF brings the record back
        assert await store.get_challenge(record.challenge_id) == record
        assert isinstance(await store.transition(settling(record)), TransitionApplied)
    finally:
        await store.close()


async def test_idle_connections_survive_a_restart(start_redis: StartRedis) -> None:
    """Pooled connections that died with the old server are replaced, never used once more."""
    server = start_redis(appendonly=True)
    store = await _open(server.url)
    try:
        records = [make_record() for _ in range(8)]
        for record in records:
            await store.create_challenge(record)
        # Eight reads at once hold eight pooled connections (creates would share one call).
        await asyncio.gather(*(store.get_challenge(r.challenge_id) for r in records))
        await asyncio.to_thread(server.restart)  # the event loop runs on, as in a server
        found = await asyncio.gather(*(store.get_challenge(r.challenge_id) for r in records))
        assert found == records
    finally:
        await store.close()


async def test_a_server_down_at_start_only_warns(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_redis()
    server.stop()
    with caplog.at_level(logging.WARNING, logger="x402srv_redis"):
        store = await _open(server.url)
    try:
        assert "unreachable at start" in caplog.text
        with pytest.raises(StoreUnavailable):
            await store.get_challenge("any")
        server.start()
        assert await store.get_challenge("any") is None
    finally:
        await store.close()


async def test_a_stalled_server_times_out(start_redis: StartRedis) -> None:
    """CLIENT PAUSE holds every command, as a server stuck in a long fsync would."""
    server = start_redis()
    store = await _open(server.url, socket_timeout_seconds=0.3)
    admin = aioredis.Redis.from_url(server.url)
    try:
        record = make_record()
        await store.create_challenge(record)
        await admin.client_pause(1500, all=True)  # CLIENT PAUSE 1500 ALL
        with pytest.raises(StoreUnavailable) as caught:
            await store.create_challenge(make_record())
        _assert_hidden(caught.value)
        await asyncio.sleep(1.5)
        assert await store.get_challenge(record.challenge_id) == record
    finally:
        await admin.aclose()
        await store.close()


async def test_out_of_memory_refuses_whole_scripts(start_redis: StartRedis) -> None:
    """With noeviction a full Redis refuses writes; a refused script changed nothing."""
    server = start_redis()
    store = await _open(server.url)
    admin = aioredis.Redis.from_url(server.url)
    try:
        record, key = make_record(), make_key()
        await store.create_challenge(record)
        await admin.config_set("maxmemory", "1")
        with pytest.raises(StoreUnavailable):
            await store.transition(settling(record, key))
        with pytest.raises(StoreUnavailable):
            await store.create_challenge(make_record(), claim_payment=make_key())
        assert await store.get_challenge(record.challenge_id) == record  # reads still work
        assert await store.get_by_payment(key) is None
        await admin.config_set("maxmemory", "0")
        assert isinstance(await store.transition(settling(record, key)), TransitionApplied)
    finally:
        await admin.aclose()
        await store.close()


async def test_a_closed_store_is_unavailable(redis_server: RedisServer) -> None:
    store = await _open(redis_server.url)
    await store.close()
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.get_challenge("any")
    with pytest.raises(StoreUnavailable):
        await store.transition(settling(make_record()))
