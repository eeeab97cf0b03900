"""Failures around the chain: the store, the pipeline's hooks, the settler itself.

``settle`` never raises. What failed before anything left is ``Rejected`` (the
buyer may pay again); a surprise after that point would be ``Unknown``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from x402srv_gaswallet import GasWalletSettler, build_gas_wallet
from x402srv_gaswallet.testing import RecordingHooks, SettlerRig

from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.interfaces import Rejected, Settled, Unknown
from x402srv.server.plugin_context import PluginContext


async def test_a_store_that_is_down_refuses_before_sending(rig: SettlerRig, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "x402srv.db")
    await store.start()
    settler = await rig.start(store=store)
    await store.close()  # the store is gone: the nonce lease cannot be taken
    hooks = rig.hooks()

    outcome = await settler.settle(rig.request(), hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == "unexpected_settle_error"
    assert hooks.noted == []
    assert rig.gas_nonce() == 0


class _CannotRecord(RecordingHooks):
    """The pipeline could not persist the txHash (its store failed)."""

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        raise OSError("disk full")


async def test_a_tx_hash_that_cannot_be_recorded_is_never_sent(rig: SettlerRig) -> None:
    settler = await rig.start()
    request = rig.request()
    hooks = _CannotRecord(rig.chain)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert len(hooks.noted) == 1
    rig.assert_nothing_moved(request)
    # The gate was left properly: the next settlement goes through at once.
    again = await settler.settle(request, rig.hooks())
    assert isinstance(again, Settled), again


async def test_a_settler_that_was_not_started_refuses(rig: SettlerRig) -> None:
    ctx = PluginContext(
        config=rig.config,
        name="gas-wallet",
        key_path="settlement.gas-wallet",
        options=rig.config.settlement.plugin_options("gas-wallet"),
        chain=rig.chain,
    )
    settler = build_gas_wallet(ctx)

    outcome = await settler.settle(rig.request(), rig.hooks())

    assert outcome == Rejected(
        "unexpected_settle_error", "The gas-wallet settler is not started.", settler_failed=True
    )


async def test_a_surprise_inside_settle_becomes_unknown_not_an_exception(
    rig: SettlerRig, caplog: pytest.LogCaptureFixture
) -> None:
    settler = await rig.start()
    request = rig.request()
    broken = replace(request, network=replace(request.network, asset="not-an-address"))

    outcome = await settler.settle(broken, rig.hooks())

    assert isinstance(outcome, Unknown)
    assert outcome.tx_hash is None
    assert "failed unexpectedly" in caplog.text


async def test_a_start_whose_chain_reader_cannot_open_leaves_the_settler_unstarted(
    rig: SettlerRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start is all or nothing: the RPC session it connected is let go, so the settler
    refuses as not started and a later start tries again (it once stayed half started)."""
    ctx = PluginContext(
        config=rig.config,
        name="gas-wallet",
        key_path="settlement.gas-wallet",
        options=rig.config.settlement.plugin_options("gas-wallet"),
        chain=None,  # its own chain reader, opened by start
    )
    settler = build_gas_wallet(ctx)
    # A proxy httpx cannot use makes the reader's client refuse to be built; the RPC
    # session (aiohttp, which ignores proxy variables) connects and reads the chain id.
    monkeypatch.setenv("ALL_PROXY", "ftp://proxy.invalid")
    try:
        with pytest.raises(ValueError, match="proxy"):
            await settler.start()

        refused = await settler.settle(rig.request(), rig.hooks())

        assert isinstance(refused, Rejected), refused
        assert refused.settler_failed
        monkeypatch.delenv("ALL_PROXY")
        await settler.start()
        settled = await settler.settle(rig.request(), rig.hooks())
        assert isinstance(settled, Settled), settled
    finally:
        await settler.close()


class _ClosedWhileRecording(RecordingHooks):
    """Shutdown closes the settler while its txHash is being recorded (a store write)."""

    def __init__(self, rig: SettlerRig, settler: GasWalletSettler) -> None:
        super().__init__(rig.chain)
        self._settler = settler

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        await self._settler.close()


async def test_a_send_after_the_settler_closed_is_refused_as_never_sent(rig: SettlerRig) -> None:
    """The settler closed (x402srv stopping) between recording the txHash and sending it.

    Regression: the RPC connection refused the send (its session was closed), but the
    refusal was read as a send cut off on its way, "maybe out": the outcome was Unknown
    with the txHash of a transaction no node ever saw, and the record stayed SETTLING
    until the chain could tell (the authorization's ``validBefore``). Nothing left: it is
    refused as nothing sent, so the buyer may pay again (or another settler take it).
    """
    settler = await rig.start()
    request = rig.request()
    hooks = _ClosedWhileRecording(rig, settler)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.settler_failed
    assert len(hooks.noted) == 1
    rig.assert_nothing_moved(request)
