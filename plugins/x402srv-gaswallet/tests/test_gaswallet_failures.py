"""Failures around the chain: the store, the pipeline's hooks, the settler itself.

``settle`` never raises. What failed before anything left is ``Rejected`` (the
buyer may pay again); a surprise after that point would be ``Unknown``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet import build_gas_wallet
from x402srv_gaswallet.testing import RecordingHooks, StartSettler, nonce_of, signed_request

from x402srv.chain import ChainReader
from x402srv.config import Config
from x402srv.default_plugins.sqlite_store import SqliteStore
from x402srv.devchain import Devchain
from x402srv.interfaces import Rejected, Settled, Unknown
from x402srv.plugin_context import PluginContext


async def test_a_store_that_is_down_refuses_before_sending(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "x402srv.db")
    await store.start()
    settler = await start_settler(config, store=store)
    await store.close()  # the store is gone: the nonce lease cannot be taken
    hooks = RecordingHooks(chain_reader)

    outcome = await settler.settle(signed_request(devchain, config, buyer), hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == "unexpected_settle_error"
    assert hooks.noted == []
    assert nonce_of(devchain, gas_account.address) == 0


class _CannotRecord(RecordingHooks):
    """The pipeline could not persist the txHash (its store failed)."""

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        raise OSError("disk full")


async def test_a_tx_hash_that_cannot_be_recorded_is_never_sent(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer)
    hooks = _CannotRecord(chain_reader)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert len(hooks.noted) == 1
    assert nonce_of(devchain, gas_account.address) == 0
    assert not devchain.authorization_state(buyer.address, request.authorization.nonce)
    # The gate was left properly: the next settlement goes through at once.
    again = await settler.settle(request, RecordingHooks(chain_reader))
    assert isinstance(again, Settled), again


async def test_a_settler_that_was_not_started_refuses(
    devchain: Devchain, chain_reader: ChainReader, config: Config, buyer: LocalAccount
) -> None:
    ctx = PluginContext(
        config=config,
        name="gas-wallet",
        key_path="settlement.gas-wallet",
        options=config.settlement.plugin_options("gas-wallet"),
        chain=chain_reader,
    )
    settler = build_gas_wallet(ctx)

    outcome = await settler.settle(
        signed_request(devchain, config, buyer), RecordingHooks(chain_reader)
    )

    assert outcome == Rejected(
        "unexpected_settle_error", "The gas-wallet settler is not started.", settler_failed=True
    )


async def test_a_surprise_inside_settle_becomes_unknown_not_an_exception(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer)
    broken = replace(request, network=replace(request.network, asset="not-an-address"))

    outcome = await settler.settle(broken, RecordingHooks(chain_reader))

    assert isinstance(outcome, Unknown)
    assert outcome.tx_hash is None
    assert "failed unexpectedly" in caplog.text
