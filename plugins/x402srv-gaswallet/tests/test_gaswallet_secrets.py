"""Security regressions: the gas wallet key and the RPC credentials never show.

Everything the settler logs at any level (web3's DEBUG records included), every
outcome it returns and every error it raises is searched for the key (with and
without ``0x``) and for the password in the RPC URL.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet.rpc import connect, disconnect
from x402srv_gaswallet.testing import (
    Configure,
    RecordingHooks,
    RpcRelay,
    StartSettler,
    key_hex,
    signed_request,
)

from x402srv.devchain import Devchain
from x402srv.errors import ConfigError
from x402srv.interfaces import Rejected, Settled
from x402srv.server.registry import Registry
from x402srv.settlement.chain import ChainReader

RPC_PASSWORD = "rpc-password-never-shown"
API_KEY = "rpc-api-key-never-shown"


def _secrets(gas_account: LocalAccount) -> list[str]:
    key = key_hex(gas_account)
    return [key, key[2:], key[2:].upper(), RPC_PASSWORD, API_KEY]


def _assert_hidden(texts: list[str], secrets: list[str]) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text


async def test_key_and_rpc_credentials_never_reach_logs_outcomes_or_errors(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    configure: Configure,
    gas_account: LocalAccount,
    buyer: LocalAccount,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # (the provider's own logger is held at WARNING: let its DEBUG lines through here too)
    caplog.set_level(logging.DEBUG, logger="x402srv_gaswallet.rpc")
    relay = await RpcRelay(devchain.rpc_url).start()
    try:
        # A hosted-RPC style URL: credentials in the user info and the API key in the path.
        rpc_url = relay.url.replace("http://", f"http://gas:{RPC_PASSWORD}@") + f"/v2/{API_KEY}"
        config = configure(rpc_url=rpc_url, options={"poll_interval_seconds": 0.05})
        # The core's ChainReader (receipts, resolution) goes direct: this test is
        # about what the plugin itself logs and returns.
        settler = await start_settler(config, chain=chain_reader)
        good = signed_request(devchain, config, buyer)
        wrong_value = replace(good.authorization, value=good.authorization.value + 1)
        bad = replace(good, authorization=wrong_value)
        texts: list[str] = [repr(settler), str(settler), str(settler.__dict__)]

        settled = await settler.settle(good, RecordingHooks(chain_reader))
        rejected = await settler.settle(bad, RecordingHooks(chain_reader))
        texts += [repr(settled), repr(rejected)]
        wrong_chain = configure(rpc_url=rpc_url, network="eip155:1")
        with pytest.raises(ConfigError) as caught:
            await start_settler(wrong_chain)
        texts.append(str(caught.value))
        await relay.stop()
        unreachable = await settler.settle(
            signed_request(devchain, config, devchain.new_account(eth=0)),
            RecordingHooks(chain_reader),
        )
        texts.append(repr(unreachable))
    finally:
        await relay.aclose()

    assert isinstance(settled, Settled) and isinstance(rejected, Rejected)
    assert isinstance(unreachable, Rejected)
    assert any(r.name.startswith("x402srv_gaswallet.rpc") for r in caplog.records)
    texts += [record.getMessage() for record in caplog.records]
    texts += [caplog.text]
    _assert_hidden(texts, _secrets(gas_account))


def test_a_config_error_about_the_key_does_not_quote_it(configure: Configure) -> None:
    config = configure(gas_key="0x" + "ab" * 31)  # 31 bytes: a plausible typo of a real key

    with pytest.raises(ConfigError) as caught:
        Registry().build(config)

    assert "ab" * 31 not in str(caught.value)
    assert caught.value.__cause__ is None


async def test_closing_the_rpc_connection_logs_nothing_at_info(
    devchain: Devchain, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: web3's "Successfully disconnected from ..." at INFO on every close (each
    ``check``, each start-up preflight) told a seller nothing they could act on."""
    caplog.set_level(logging.INFO)
    w3 = await connect(devchain.rpc_url, request_timeout=5)
    assert await w3.eth.chain_id == devchain.chain_id
    await disconnect(w3)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("x402srv_gaswallet")] == []
