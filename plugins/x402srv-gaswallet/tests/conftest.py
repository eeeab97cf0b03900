"""One anvil chain with the EIP-3009 token for every gas-wallet test.

This directory overrides the repository-wide ``devchain`` with its own chain:
these tests switch automine off and move chain time forward, which must not
leak into other suites. Tests stay independent on it by using fresh random
accounts: a new gas wallet (nonce 0), a new buyer, a new seller per test.

Most tests take ``rig`` (``x402srv_gaswallet.testing.SettlerRig``): that wallet,
seller and config, settlers started through the plugin's factory, and the checks
that read the chain (``rig.assert_nothing_moved(request)``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet import GasWalletSettler, build_gas_wallet
from x402srv_gaswallet.testing import Configure, SettlerRig, StartSettler, key_hex, make_config

from x402srv.config.models import Config
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.devchain import Devchain
from x402srv.interfaces import Store
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader

#: Fast polling: anvil mines on send, so the first or second poll finds the receipt.
FAST = {"poll_interval_seconds": 0.05, "receipt_timeout_seconds": 10}


@pytest.fixture(scope="session")
def devchain() -> Iterator[Devchain]:
    with Devchain.start(project_dir=Path(__file__).parent) as chain:
        yield chain


@pytest.fixture(scope="session")
async def chain_reader(devchain: Devchain) -> AsyncIterator[ChainReader]:
    reader = ChainReader(devchain.rpc_url)
    await reader.open()
    yield reader
    await reader.close()


@pytest.fixture
def gas_account(devchain: Devchain) -> LocalAccount:
    return devchain.new_account(eth=10, usdc_atomic=0)


@pytest.fixture
def seller(devchain: Devchain) -> str:
    return devchain.new_account(eth=0, usdc_atomic=0).address


@pytest.fixture
def buyer(devchain: Devchain) -> LocalAccount:
    return devchain.new_account(eth=0)


@pytest.fixture
def configure(devchain: Devchain, gas_account: LocalAccount, seller: str) -> Configure:
    """``configure(**overrides)``: ``make_config`` for this test's gas wallet and seller,
    on anvil's RPC unless ``rpc_url`` says otherwise."""
    return partial(
        make_config, devchain, gas_key=key_hex(gas_account), seller=seller, rpc_url=devchain.rpc_url
    )


@pytest.fixture
def config(configure: Configure) -> Config:
    return configure(options=FAST)


@pytest.fixture
async def start_settler(chain_reader: ChainReader) -> AsyncIterator[StartSettler]:
    """Build settlers through the plugin's factory, start them, close them at teardown."""
    started: list[GasWalletSettler] = []

    async def start(
        config: Config,
        *,
        store: Store | None = None,
        chain: ChainReader | None = chain_reader,
        options: Mapping[str, Any] | None = None,
    ) -> GasWalletSettler:
        ctx = PluginContext(
            config=config,
            name="gas-wallet",
            key_path="settlement.gas-wallet",
            options=dict(options)
            if options is not None
            else config.settlement.plugin_options("gas-wallet"),
            store=store if store is not None else MemoryStore(),
            chain=chain,
        )
        settler = build_gas_wallet(ctx)
        await settler.start()
        started.append(settler)
        return settler

    yield start
    for settler in started:
        await settler.close()


@pytest.fixture
def rig(
    devchain: Devchain,
    chain_reader: ChainReader,
    gas_account: LocalAccount,
    config: Config,
    configure: Configure,
    start_settler: StartSettler,
) -> SettlerRig:
    """This test's gas wallet, seller and ``config``, with ``start_settler``; the buyer's
    account is made when the test first asks for ``rig.buyer``."""
    return SettlerRig(devchain, chain_reader, gas_account, config, configure, start_settler)
