"""Transactions that revert on-chain after a clean simulation.

Automine is switched off so a test can put something in front of the settler's
transaction in the same block (another settler, the payer draining the
balance), then mine: the revert is real, decided by the token.
"""

from __future__ import annotations

import asyncio

from eth_account.signers.local import LocalAccount
from eth_typing import HexStr
from x402srv_gaswallet.testing import (
    PRICE,
    RecordingHooks,
    StartSettler,
    key_hex,
    make_config,
    manual_mining,
    signed_request,
)

from x402srv.chain import ChainReader
from x402srv.config import Config
from x402srv.devchain import Devchain, encode_call
from x402srv.interfaces import Rejected, Settled

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
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
) -> None:
    other_wallet = devchain.new_account(eth=10, usdc_atomic=0)
    other_config = make_config(
        devchain,
        gas_key=key_hex(other_wallet),
        seller=config.seller.wallet_address,
        rpc_url=devchain.rpc_url,
        options=WAIT,
    )
    settlers = [await start_settler(config), await start_settler(other_config)]
    request = signed_request(devchain, config, buyer)
    hooks = [RecordingHooks(chain_reader), RecordingHooks(chain_reader)]

    with manual_mining(devchain):
        racing = asyncio.gather(
            *(s.settle(request, h) for s, h in zip(settlers, hooks, strict=True))
        )
        await _until_pooled(chain_reader, hooks)
        devchain.rpc.mine()
        outcomes = await racing

    (transfer,) = devchain.transfer_logs(to=config.seller.wallet_address)
    assert outcomes == [Settled(transfer.tx_hash, buyer.address)] * 2
    loser = next(h.noted[0] for h in hooks if h.noted[0] != transfer.tx_hash)
    lost = await chain_reader.receipt(loser)
    assert lost is not None and lost.status == 0
    assert devchain.balance_of(config.seller.wallet_address) == PRICE


async def test_a_payer_who_drains_the_balance_first_gets_transaction_failed(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
) -> None:
    payer = devchain.new_account(eth=1)
    elsewhere = devchain.new_account(eth=0, usdc_atomic=0).address
    settler = await start_settler(config)
    request = signed_request(devchain, config, payer)
    hooks = RecordingHooks(chain_reader)
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
