"""When the node is slow, silent or gone: Unknown with the txHash, or Rejected if nothing left."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet.testing import (
    RecordingHooks,
    RpcRelay,
    StartSettler,
    key_hex,
    make_config,
    manual_mining,
    nonce_of,
    signed_request,
    tx_nonce,
)

from x402srv.chain import ChainReader
from x402srv.config import Config
from x402srv.devchain import Devchain
from x402srv.interfaces import Rejected, Settled, SettlementRequest, Unknown
from x402srv.resolution import Transferred, Undecided, resolve_authorization

#: Short timeouts so a silent node costs a second, not the production 30 s.
IMPATIENT = {
    "poll_interval_seconds": 0.05,
    "receipt_timeout_seconds": 1,
    "rpc_timeout_seconds": 0.5,
    "nonce_lease_seconds": 2,
}


@pytest.fixture
async def relay(devchain: Devchain) -> AsyncIterator[RpcRelay]:
    relay = await RpcRelay(devchain.rpc_url).start()
    yield relay
    await relay.aclose()


@pytest.fixture
def relayed_config(
    devchain: Devchain, relay: RpcRelay, gas_account: LocalAccount, seller: str
) -> Config:
    """The settler talks to anvil through the relay; the chain reader goes direct."""
    return make_config(
        devchain, gas_key=key_hex(gas_account), seller=seller, rpc_url=relay.url, options=IMPATIENT
    )


async def _verdict(chain: ChainReader, request: SettlementRequest, tx_hint: str | None) -> object:
    auth = request.authorization
    return await resolve_authorization(
        chain,
        asset=request.network.asset,
        payer=auth.payer,
        pay_to=auth.to,
        value=auth.value,
        nonce=auth.nonce,
        valid_before=auth.valid_before,
        tx_hint=tx_hint,
    )


async def test_a_receipt_that_never_comes_is_unknown_with_its_tx_hash(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
) -> None:
    settler = await start_settler(config, options=IMPATIENT)
    request = signed_request(devchain, config, buyer)
    hooks = RecordingHooks(chain_reader)
    with manual_mining(devchain):  # the transaction waits in the pool
        outcome = await settler.settle(request, hooks)

        assert isinstance(outcome, Unknown), outcome
        assert outcome.tx_hash is not None
        assert hooks.noted == [outcome.tx_hash]
        assert isinstance(await _verdict(chain_reader, request, outcome.tx_hash), Undecided)

        devchain.rpc.mine()

        verdict = await _verdict(chain_reader, request, outcome.tx_hash)
        assert verdict == Transferred(outcome.tx_hash)
    assert devchain.balance_of(config.seller.wallet_address) == request.authorization.value


async def test_a_send_whose_reply_is_lost_is_followed_to_its_receipt(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    relayed_config: Config,
    relay: RpcRelay,
    buyer: LocalAccount,
) -> None:
    """The node got the transaction but the reply never came: the send may or may
    not be out, so the settler polls for the receipt instead of giving up, and the
    next settlement asks the chain for the nonce instead of trusting a guess."""
    settler = await start_settler(relayed_config)
    relay.withhold_sends = True
    hooks = RecordingHooks(chain_reader)

    outcome = await settler.settle(signed_request(devchain, relayed_config, buyer), hooks)

    assert relay.forwarded_sends == 1
    assert isinstance(outcome, Settled), outcome
    assert [outcome.tx_hash] == hooks.noted
    relay.withhold_sends = False
    relay.release.set()
    second = await settler.settle(
        signed_request(devchain, relayed_config, devchain.new_account(eth=0)),
        RecordingHooks(chain_reader),
    )
    assert isinstance(second, Settled), second
    assert (tx_nonce(devchain, outcome.tx_hash), tx_nonce(devchain, second.tx_hash)) == (0, 1)


async def test_an_unreachable_node_before_sending_refuses_and_sends_nothing(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    relayed_config: Config,
    relay: RpcRelay,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(relayed_config)
    request = signed_request(devchain, relayed_config, buyer)
    await relay.stop()
    hooks = RecordingHooks(chain_reader)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == "unexpected_settle_error"
    assert "could not be reached" in outcome.detail
    assert hooks.noted == []
    assert nonce_of(devchain, gas_account.address) == 0
    assert not devchain.authorization_state(buyer.address, request.authorization.nonce)


class _StopRelayOnNote(RecordingHooks):
    """The node goes away between signing and sending: the connect is refused."""

    def __init__(self, chain: ChainReader, relay: RpcRelay) -> None:
        super().__init__(chain)
        self.relay = relay

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        await self.relay.stop()


async def test_a_node_gone_at_the_moment_of_sending_refuses_and_sends_nothing(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    relayed_config: Config,
    relay: RpcRelay,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(relayed_config)
    request = signed_request(devchain, relayed_config, buyer)
    hooks = _StopRelayOnNote(chain_reader, relay)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert len(hooks.noted) == 1
    assert relay.forwarded_sends == 0
    assert nonce_of(devchain, gas_account.address) == 0
    assert not devchain.authorization_state(buyer.address, request.authorization.nonce)
