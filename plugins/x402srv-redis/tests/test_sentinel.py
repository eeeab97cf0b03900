"""Sentinel: ``redis+sentinel://`` URLs, ``wait_replicas``, and a real forced failover.

The servers are real processes (``SentinelGroup``): a primary, a replica and
Sentinels, all with ``appendfsync always``. The contract suite runs through
Sentinel with ``wait_replicas = 1``. The failover test runs an x402srv server
and the test's own store against one group, forces ``SENTINEL FAILOVER`` while
both keep writing, and checks what must hold whatever the timing: every write
that was acknowledged is on the new primary, every request was answered 402 or
503 ``STORE_UNAVAILABLE`` (never 500), and service resumes by itself. Nothing
waits on a timer: each step polls for the state it needs.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from pydantic import ValidationError
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.sentinel import SentinelUrl, parse_sentinel_url
from x402srv_redis.testing import StartRedis, redis_server_binary
from x402srv_redis.testing_sentinel import SentinelGroup

from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.config.models import Secret, parse_config
from x402srv.devchain import Devchain
from x402srv.errors import ConfigError, StoreUnavailable
from x402srv.interfaces import Store, TransitionApplied
from x402srv.testing import StoreContract
from x402srv.testing.builders import make_key, make_record
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess, seller_config
from x402srv.testing.store_contract import settling

PASSWORD = "pw:/@" + secrets.token_urlsafe(8)  # needs quoting in a URL
SENTINEL_PASSWORD = "spw-" + secrets.token_urlsafe(8)

# ------------------------------------------------------------ the URL


def test_a_sentinel_url_names_sentinels_service_db_and_credentials() -> None:
    assert parse_sentinel_url(
        "redis+sentinel://app:p%40ss@10.0.0.1:26380,sentinel-b,[fd00::3]:26381/orders/2"
        "?sentinel_password=s%2Fpw&sentinel_username=watcher"
    ) == SentinelUrl(
        sentinels=(("10.0.0.1", 26380), ("sentinel-b", 26379), ("fd00::3", 26381)),
        service="orders",
        db=2,
        username="app",
        password="p@ss",
        sentinel_username="watcher",
        sentinel_password="s/pw",
    )
    assert parse_sentinel_url("redis+sentinel://:pw@h:1/svc") == SentinelUrl(
        (("h", 1),), "svc", 0, None, "pw"
    )
    shown = parse_sentinel_url("redis+sentinel://:pw@h:1,[::1]:2/svc").display()
    assert shown == "redis+sentinel://h:1,[::1]:2/<redacted>"


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://:s3cret@h:26379",  # no service
        "redis+sentinel://:s3cret@h:26379/",
        "redis+sentinel://:s3cret@h:26379/svc/zero",
        "redis+sentinel://:s3cret@h:99999/svc",
        "redis+sentinel://:s3cret@h:26379,/svc",
        "redis+sentinel://:s3cret@h:26379/svc?password=s3cret",
    ],
)
def test_a_malformed_sentinel_url_is_a_config_error_without_its_secret(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sentinel_url(url)
    assert caught.value.path == "store.url"
    assert "s3cret" not in str(caught.value)


def test_the_core_config_takes_a_sentinel_url(tmp_path: Path) -> None:
    url = "redis+sentinel://:pw@[fd00::1]:26379,10.0.0.2:26379/x402srv/0"
    config = parse_config(
        seller_config(
            rpc_url="http://127.0.0.1:8545",
            chain_id=31337,
            asset="0x" + "11" * 20,
            wallet_address=Account.create().address,
            store={"backend": "redis", "url": url},
            settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
        ),
        base_dir=tmp_path,
        env={},
    )
    assert config.store.url is not None
    assert config.store.url.reveal() == url


def test_wait_replicas_must_fit_inside_the_socket_timeout() -> None:
    with pytest.raises(ValidationError, match="below socket_timeout_seconds"):
        RedisOptions(wait_replicas=1, wait_timeout_seconds=2, socket_timeout_seconds=2)


# ------------------------------------------------------------ wait_replicas


async def test_a_write_no_replica_confirmed_is_not_acknowledged(
    start_redis: StartRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """A primary without its replica: every write answers 503, reads still work."""
    server = start_redis(appendonly=True, appendfsync="always")
    store = RedisStore(Secret(server.url), RedisOptions(wait_replicas=1, wait_timeout_seconds=0.1))
    await store.start()
    try:
        with caplog.at_level(logging.ERROR, logger="x402srv_redis"):
            with pytest.raises(StoreUnavailable):
                await store.create_challenge(make_record())
            with pytest.raises(StoreUnavailable):
                await store.acquire_lease("gas", "w", 30, 1.0)
        assert "ReplicasBehind: 0 of 1 replicas confirmed" in caplog.text
        assert await store.get_challenge("absent") is None
    finally:
        await store.close()


# ------------------------------------------------------------ the contract, through Sentinel


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (set X402SRV_REDIS_SERVER to its path)")
    with SentinelGroup(
        tmp_path_factory.mktemp("sentinel"),
        password=PASSWORD,
        sentinel_password=SENTINEL_PASSWORD,
    ) as started:
        yield started


class TestSentinelStore(StoreContract):
    """Every store guarantee holds through Sentinel, with each write on the replica too."""

    durable = True

    @pytest.fixture
    async def store(self, group: SentinelGroup, key_prefix: str) -> AsyncIterator[RedisStore]:
        store = RedisStore(Secret(group.url), RedisOptions(key_prefix=key_prefix, wait_replicas=1))
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


async def test_logs_show_the_sentinels_never_a_password(
    group: SentinelGroup, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="x402srv_redis"):
        store = RedisStore(Secret(group.url), RedisOptions())
        await store.start()
        await store.close()
    assert f"redis+sentinel://127.0.0.1:{group.sentinel_ports[0]}/<redacted>" in caplog.text
    assert "appendfsync always" in caplog.text  # the primary's settings were read
    assert PASSWORD not in caplog.text
    assert SENTINEL_PASSWORD not in caplog.text
    assert PASSWORD not in repr(store)


# ------------------------------------------------------------ a forced failover


class Writer:
    """Keeps writing through one path until told to stop; remembers what was acknowledged."""

    def __init__(self) -> None:
        self.answers: Counter[tuple[int, str | None]] = Counter()
        self.acknowledged: list[str] = []  # challengeIds the server answered 402 for
        self.claims: list[tuple[ChallengeRecord, PaymentKey]] = []  # applied SETTLING moves
        self.store_refusals = 0
        self.stop = asyncio.Event()

    async def http(self, url: str) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            while not self.stop.is_set():
                response = await client.post(url, json={"planId": "hourly"})
                body = response.json()
                if response.status_code == 402:
                    self.answers[(402, None)] += 1
                    self.acknowledged.append(body["challengeId"])
                    continue
                assert response.headers["content-type"].startswith("application/problem+json")
                assert int(response.headers["retry-after"]) >= 1
                self.answers[(response.status_code, body.get("code"))] += 1
                await asyncio.sleep(0.05)

    async def claims_on(self, store: RedisStore) -> None:
        while not self.stop.is_set():
            record, key = make_record(), make_key()
            try:
                await store.create_challenge(record)
                if isinstance(await store.transition(settling(record, key)), TransitionApplied):
                    self.claims.append((record, key))
            except StoreUnavailable:
                self.store_refusals += 1
                await asyncio.sleep(0.05)


@pytest.fixture
def failover_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (set X402SRV_REDIS_SERVER to its path)")
    with SentinelGroup(tmp_path / "group", password=PASSWORD, sentinels=3) as started:
        yield started


async def test_a_forced_failover_loses_no_acknowledged_write(
    failover_group: SentinelGroup,
    devchain: Devchain,
    tmp_path: Path,
    key_prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = failover_group
    wallet = Account.create().address
    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    redis_options: dict[str, Any] = {
        "key_prefix": key_prefix,
        "wait_replicas": 1,
        "wait_timeout_seconds": 0.5,
        "socket_timeout_seconds": 1,
        "connect_timeout_seconds": 1,
    }
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={
            "backend": "redis",
            "url": {"env": "X402SRV_TEST_REDIS_URL"},
            "redis": redis_options,
        },
        settlement={
            "strategy": "gas-wallet",
            "gas_wallet_private_key": {"env": "X402SRV_TEST_GAS"},
        },
    )
    env = {"X402SRV_TEST_REDIS_URL": group.url, "X402SRV_TEST_GAS": "0x" + bytes(gas.key).hex()}
    server = ServerProcess(config, tmp_path / "x402srv", env=env)
    await asyncio.to_thread(server.start)
    store = RedisStore(Secret(group.url), RedisOptions.model_validate(redis_options))
    await store.start()
    try:
        writer = Writer()
        tasks = [
            asyncio.ensure_future(writer.http(server.access_url)),
            asyncio.ensure_future(writer.claims_on(store)),
        ]
        await _until(
            lambda: writer.acknowledged and writer.claims, "writes before the failover", tasks
        )
        started = time.monotonic()
        old = await asyncio.to_thread(group.failover)
        new = await asyncio.to_thread(group.settled, old)
        settled = time.monotonic() - started
        # Service resumes by itself: new writes are acknowledged on the new primary.
        seen = (len(writer.acknowledged), len(writer.claims))
        await _until(
            lambda: len(writer.acknowledged) > seen[0] + 2 and len(writer.claims) > seen[1] + 2,
            "writes after the failover",
            tasks,
        )
        writer.stop.set()
        await asyncio.gather(*tasks)

        assert set(writer.answers) <= {(402, None), (503, "STORE_UNAVAILABLE")}, writer.answers
        assert group.primary_port() == new != old
        with group.node(new) as primary:  # everything acknowledged is on the new primary
            pipe = primary.pipeline(transaction=False)
            for challenge_id in writer.acknowledged:
                pipe.exists(f"{key_prefix}c:{challenge_id}")
            assert all(await asyncio.to_thread(pipe.execute))
        for record, key in writer.claims:
            found = await store.get_by_payment(key)
            assert found is not None
            assert (found.challenge_id, found.state) == (record.challenge_id, State.SETTLING)

        # A whole purchase on the new primary: claim, gas-wallet lease, settlement, grant.
        buyer = devchain.new_account()
        http, _ = paying_client(buyer)
        async with http:
            paid = await http.post(server.access_url, json={"planId": "hourly"})
        assert paid.status_code == 200, paid.text
        assert "Traceback" not in server.logs()
        with capsys.disabled():
            print(
                f"\n[sentinel] forced failover {old} -> {new}: old primary following the new "
                f"one after {settled:.1f} s; HTTP answers {dict(writer.answers)}; "
                f"{len(writer.acknowledged)} acknowledged challenges and {len(writer.claims)} "
                f"claims all on the new primary; store refusals {writer.store_refusals}"
            )
    finally:
        await store.close()
        await asyncio.to_thread(server.stop)


async def _until(
    condition: Callable[[], object], what: str, tasks: Sequence[asyncio.Future[None]]
) -> None:
    """Poll ``condition`` (90 s at most); a writer that failed meanwhile fails the test."""
    end = time.monotonic() + 90
    while not condition():
        for task in tasks:
            if task.done():
                task.result()  # its exception, or:
                raise AssertionError(f"a writer stopped before {what}")
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not reached in 90 s")
        await asyncio.sleep(0.05)
