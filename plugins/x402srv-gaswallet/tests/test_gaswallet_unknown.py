"""When the node is slow, silent or gone: Unknown with the txHash, or Rejected if nothing left."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from x402srv_gaswallet.testing import RecordingHooks, RpcRelay, SettlerRig, manual_mining, tx_nonce

from x402srv.devchain import Devchain
from x402srv.interfaces import Rejected, Settled, SettlementRequest, Unknown
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.verdicts import Transferred, Undecided, resolve_authorization

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
def relayed(rig: SettlerRig, relay: RpcRelay) -> SettlerRig:
    """The settler talks to anvil through the relay; the chain reader goes direct."""
    return replace(rig, config=rig.configure(rpc_url=relay.url, options=IMPATIENT))


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


async def test_a_receipt_that_never_comes_is_unknown_with_its_tx_hash(rig: SettlerRig) -> None:
    settler = await rig.start(options=IMPATIENT)
    request = rig.request()
    hooks = rig.hooks()
    with manual_mining(rig.devchain):  # the transaction waits in the pool
        outcome = await settler.settle(request, hooks)

        assert isinstance(outcome, Unknown), outcome
        assert outcome.tx_hash is not None
        assert hooks.noted == [outcome.tx_hash]
        assert isinstance(await _verdict(rig.chain, request, outcome.tx_hash), Undecided)

        rig.devchain.rpc.mine()

        verdict = await _verdict(rig.chain, request, outcome.tx_hash)
        assert verdict == Transferred(outcome.tx_hash)
    assert rig.received() == request.authorization.value


async def test_a_send_whose_reply_is_lost_is_followed_to_its_receipt(
    relayed: SettlerRig, relay: RpcRelay
) -> None:
    """The node got the transaction but the reply never came: the send may or may
    not be out, so the settler polls for the receipt instead of giving up, and the
    next settlement asks the chain for the nonce instead of trusting a guess."""
    settler = await relayed.start()
    relay.withhold_sends = True
    hooks = relayed.hooks()

    outcome = await settler.settle(relayed.request(), hooks)

    assert relay.forwarded_sends == 1
    assert isinstance(outcome, Settled), outcome
    assert [outcome.tx_hash] == hooks.noted
    relay.withhold_sends = False
    relay.release.set()
    second = await settler.settle(
        relayed.request(relayed.devchain.new_account(eth=0)), relayed.hooks()
    )
    assert isinstance(second, Settled), second
    assert [tx_nonce(relayed.devchain, o.tx_hash) for o in (outcome, second)] == [0, 1]


async def test_an_unreachable_node_before_sending_refuses_and_sends_nothing(
    relayed: SettlerRig, relay: RpcRelay
) -> None:
    settler = await relayed.start()
    request = relayed.request()
    await relay.stop()
    hooks = relayed.hooks()

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == "unexpected_settle_error"
    assert "could not be reached" in outcome.detail
    assert hooks.noted == []
    relayed.assert_nothing_moved(request)


class _StopRelayOnNote(RecordingHooks):
    """The node goes away between signing and sending: the connect is refused."""

    def __init__(self, chain: ChainReader, relay: RpcRelay) -> None:
        super().__init__(chain)
        self.relay = relay

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        await self.relay.stop()


async def test_a_node_gone_at_the_moment_of_sending_refuses_and_sends_nothing(
    relayed: SettlerRig, relay: RpcRelay
) -> None:
    settler = await relayed.start()
    request = relayed.request()
    hooks = _StopRelayOnNote(relayed.chain, relay)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert len(hooks.noted) == 1
    assert relay.forwarded_sends == 0
    relayed.assert_nothing_moved(request)
