"""Transactions that revert on-chain after a clean simulation.

Automine is switched off so a test can put something in front of the settler's
transaction in the same block (another settler, the payer draining the
balance), then mine: the revert is real, decided by the token.
"""

from __future__ import annotations

import asyncio

from eth_typing import HexStr
from x402srv_gaswallet.testing import PRICE, RecordingHooks, SettlerRig, key_hex, manual_mining

from x402srv.devchain import encode_call
from x402srv.interfaces import Rejected, Settled
from x402srv.settlement.chain import ChainReader

WAIT = {"poll_interval_seconds": 0.05, "receipt_timeout_seconds": 10}


async def _until_pooled(chain: ChainReader, hooks: list[RecordingHooks]) -> None:
    """Wait until every settler's transaction sits in the node's pool."""
    for _ in range(250):
        hashes = [h for each in hooks for h in each.noted]
        if len(hashes) == len(hooks):
            found = [await chain.call("eth_getTransactionByHash", [h]) for h in hashes]
            if all(found):
                return
        await asyncio.sleep(0.02)
    raise AssertionError("the settlers' transactions never reached the pool")


async def test_two_settlers_racing_one_authorization_both_answer_the_winner(
    rig: SettlerRig,
) -> None:
    other_wallet = rig.devchain.new_account(eth=10, usdc_atomic=0)
    other_config = rig.configure(gas_key=key_hex(other_wallet), options=WAIT)
    settlers = [await rig.start(), await rig.start(other_config)]
    request = rig.request()
    hooks = [rig.hooks(), rig.hooks()]

    with manual_mining(rig.devchain):
        racing = asyncio.gather(
            *(s.settle(request, h) for s, h in zip(settlers, hooks, strict=True))
        )
        await _until_pooled(rig.chain, hooks)
        rig.devchain.rpc.mine()
        outcomes = await racing

    (transfer,) = rig.devchain.transfer_logs(to=rig.seller)
    assert outcomes == [Settled(transfer.tx_hash, rig.buyer.address)] * 2
    loser = next(h.noted[0] for h in hooks if h.noted[0] != transfer.tx_hash)
    lost = await rig.chain.receipt(loser)
    assert lost is not None and lost.status == 0
    assert rig.received() == PRICE


async def test_a_payer_who_drains_the_balance_first_gets_transaction_failed(
    rig: SettlerRig,
) -> None:
    devchain, chain_reader = rig.devchain, rig.chain
    payer = devchain.new_account(eth=1)
    elsewhere = devchain.new_account(eth=0, usdc_atomic=0).address
    settler = await rig.start()
    request = rig.request(payer)
    hooks = rig.hooks()
    # The payer moves everything away with a higher tip: mined first in the block.
    drain = payer.sign_transaction(
        {
            "type": 2,
            "chainId": devchain.chain_id,
            "nonce": 0,
            "to": HexStr(devchain.token.address),
            "value": 0,
            "data": encode_call(
                "transfer(address,uint256)", elsewhere, devchain.balance_of(payer.address)
            ),
            "gas": 100_000,
            "maxFeePerGas": 200 * 10**9,
            "maxPriorityFeePerGas": 100 * 10**9,
        }
    )

    with manual_mining(devchain):
        settling = asyncio.ensure_future(settler.settle(request, hooks))
        await _until_pooled(chain_reader, [hooks])
        await chain_reader.call(
            "eth_sendRawTransaction", ["0x" + bytes(drain.raw_transaction).hex()]
        )
        devchain.rpc.mine()
        outcome = await settling

    assert outcome == Rejected(
        "transaction_failed", "The token contract refused the transfer; nothing moved."
    )
    receipt = await chain_reader.receipt(hooks.noted[0])
    assert receipt is not None and receipt.status == 0
    assert not devchain.authorization_state(payer.address, request.authorization.nonce)
