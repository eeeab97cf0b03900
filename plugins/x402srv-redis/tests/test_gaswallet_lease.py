"""The gas wallet's nonce lease, unchanged, on the Redis store: instances never collide.

Two ``GasWalletSettler`` objects with their own ``RedisStore`` stand for two
x402srv hosts: they share nothing but Redis (each has its own asyncio lock).
The crashed holder is a real process killed with SIGKILL while it holds the
lease. The chain is the session's anvil.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet import GasWalletSettler, build_gas_wallet
from x402srv_gaswallet.testing import (
    PRICE,
    RecordingHooks,
    key_hex,
    make_config,
    signed_request,
    tx_nonce,
)
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer

from x402srv.config.models import Config, Secret
from x402srv.devchain import Devchain
from x402srv.interfaces import Settled
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader

FAST = {"poll_interval_seconds": 0.05, "receipt_timeout_seconds": 10}

_HOLDER = r"""
import asyncio, sys, time
from x402srv.config.models import Secret
from x402srv_redis import RedisOptions, RedisStore

url, prefix, name, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])

async def main():
    store = RedisStore(Secret(url), RedisOptions(key_prefix=prefix))
    await store.start()
    lease = await store.acquire_lease(name, "doomed-host:1", ttl, time.time())
    print("held" if lease else "busy", lease.fence if lease else 0, flush=True)
    await asyncio.sleep(3600)  # killed here, never releases

asyncio.run(main())
"""


@pytest.fixture(scope="module")
async def chain_reader(devchain: Devchain) -> AsyncIterator[ChainReader]:
    reader = ChainReader(devchain.rpc_url)
    await reader.open()
    yield reader
    await reader.close()


@pytest.fixture
async def stores(redis_server: RedisServer, key_prefix: str) -> AsyncIterator[list[RedisStore]]:
    """Two stores on one Redis and prefix, as two x402srv hosts would have."""
    opened = [
        RedisStore(Secret(redis_server.url), RedisOptions(key_prefix=key_prefix)) for _ in range(2)
    ]
    for store in opened:
        await store.start()
    yield opened
    for store in opened:
        await store.close()


@pytest.fixture
def gas_account(devchain: Devchain) -> LocalAccount:
    return devchain.new_account(eth=10, usdc_atomic=0)


@pytest.fixture
def config(devchain: Devchain, gas_account: LocalAccount) -> Config:
    return make_config(
        devchain,
        gas_key=key_hex(gas_account),
        seller=devchain.new_account(eth=0, usdc_atomic=0).address,
        rpc_url=devchain.rpc_url,
        options=FAST,
    )


@pytest.fixture
def holder_processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _settler(
    config: Config, store: RedisStore, chain: ChainReader, options: dict[str, float] | None = None
) -> GasWalletSettler:
    ctx = PluginContext(
        config=config,
        name="gas-wallet",
        key_path="settlement.gas-wallet",
        options=options or config.settlement.plugin_options("gas-wallet"),
        store=store,
        chain=chain,
    )
    settler = build_gas_wallet(ctx)
    await settler.start()
    return settler


def _lease_name(devchain: Devchain, wallet: str) -> str:
    return f"gas-wallet-nonce:{devchain.chain_id}:{wallet.lower()}"


async def test_two_hosts_settle_at_once_without_nonce_collisions(
    devchain: Devchain,
    chain_reader: ChainReader,
    config: Config,
    gas_account: LocalAccount,
    stores: list[RedisStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settlers = [await _settler(config, store, chain_reader) for store in stores]
    try:
        requests = [
            signed_request(devchain, config, devchain.new_account(eth=0), challenge=f"c{i}")
            for i in range(20)
        ]
        caplog.set_level("INFO")
        outcomes = await asyncio.gather(
            *(
                settlers[i % 2].settle(request, RecordingHooks(chain_reader))
                for i, request in enumerate(requests)
            )
        )
    finally:
        for settler in settlers:
            await settler.close()
    assert all(isinstance(o, Settled) for o in outcomes), outcomes
    hashes = [o.tx_hash for o in outcomes if isinstance(o, Settled)]
    assert sorted(tx_nonce(devchain, h) for h in hashes) == list(range(20))
    assert devchain.balance_of(config.seller.wallet_address) == 20 * PRICE
    assert not [r for r in caplog.records if "resyncing" in r.getMessage()]
    probe = await stores[0].acquire_lease(
        _lease_name(devchain, gas_account.address), "probe", 1, time.time()
    )
    assert probe is not None
    assert probe.fence == 21  # twenty holders before the probe, each with its own fence
    assert probe.value is not None
    assert json.loads(probe.value)["next_nonce"] == 20


async def test_a_crashed_holder_blocks_for_at_most_its_lease(
    devchain: Devchain,
    chain_reader: ChainReader,
    config: Config,
    gas_account: LocalAccount,
    stores: list[RedisStore],
    redis_server: RedisServer,
    holder_processes: list[subprocess.Popen[str]],
) -> None:
    ttl = 1.5
    options = {"poll_interval_seconds": 0.05, "nonce_lease_seconds": ttl, "rpc_timeout_seconds": 1}
    settler = await _settler(config, stores[0], chain_reader, options)
    try:
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _HOLDER,
                redis_server.url,
                stores[0].keys.prefix,
                _lease_name(devchain, gas_account.address),
                str(ttl),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        holder_processes.append(holder)
        assert holder.stdout is not None
        assert holder.stdout.readline().split() == ["held", "1"]
        taken_at = time.monotonic()
        holder.kill()  # a crash: the lease stays in Redis, unreleased
        holder.wait()

        request = signed_request(devchain, config, devchain.new_account(eth=0))
        outcome = await settler.settle(request, RecordingHooks(chain_reader))
        waited = time.monotonic() - taken_at
    finally:
        await settler.close()
    assert isinstance(outcome, Settled), outcome
    assert 0.5 * ttl < waited < ttl + 1.0
    assert tx_nonce(devchain, outcome.tx_hash) == 0
    after = await stores[1].acquire_lease(
        _lease_name(devchain, gas_account.address), "probe", 1, time.time()
    )
    assert after is not None
    assert after.fence == 3  # the crashed holder's 1, the settler's 2
