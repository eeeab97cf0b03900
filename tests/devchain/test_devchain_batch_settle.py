"""BatchSettle on a real anvil: several authorizations in ONE transaction, all or nothing."""

from __future__ import annotations

import pytest
from eth_utils.crypto import keccak

from x402srv.devchain import (
    Devchain,
    RpcError,
    deploy_batch_settle,
    settle_batch,
    settle_on_chain,
    sign_transfer_authorization,
)

USED_TOPIC = "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex()
HOUR = 3600


def test_one_transaction_settles_every_authorization(devchain: Devchain) -> None:
    """Two payers (one of them twice) to one payee: one receipt, three AuthorizationUsed."""
    alice, bob, relayer = devchain.new_account(), devchain.new_account(), devchain.new_account()
    payee = devchain.new_account(eth=0, usdc_atomic=0).address
    batch = deploy_batch_settle(devchain.rpc, devchain.deployer)
    valid_before = devchain.block_timestamp() + HOUR
    signed = [
        sign_transfer_authorization(payer, devchain.token, payee, 100, 0, valid_before)
        for payer in (alice, bob, alice)
    ]

    tx_hash = settle_batch(
        devchain, relayer, batch, [(auth, signature) for signature, auth in signed]
    )

    receipt = devchain.rpc.wait_for_receipt(tx_hash)
    used = [log["topics"][2] for log in receipt.logs if log["topics"][0] == USED_TOPIC]
    assert used == [auth["nonce"] for _, auth in signed]
    assert {log.tx_hash.lower() for log in devchain.transfer_logs(to=payee)} == {tx_hash}
    assert devchain.balance_of(payee) == 300
    for _, auth in signed:
        assert devchain.authorization_state(auth["from"], auth["nonce"])


def test_one_refused_authorization_reverts_the_batch(devchain: Devchain) -> None:
    """An authorization already used elsewhere makes the whole batch revert: nothing moves."""
    alice, relayer = devchain.new_account(), devchain.new_account()
    payee = devchain.new_account(eth=0, usdc_atomic=0).address
    batch = deploy_batch_settle(devchain.rpc, devchain.deployer)
    valid_before = devchain.block_timestamp() + HOUR
    first_sig, first = sign_transfer_authorization(alice, devchain.token, payee, 7, 0, valid_before)
    second_sig, second = sign_transfer_authorization(
        alice, devchain.token, payee, 7, 0, valid_before
    )
    settle_on_chain(devchain, relayer, first, first_sig)

    with pytest.raises(RpcError) as info:
        settle_batch(devchain, relayer, batch, [(second, second_sig), (first, first_sig)])

    assert info.value.revert_reason == "FiatTokenV2: authorization is used or canceled"
    assert not devchain.authorization_state(alice.address, second["nonce"])
    assert devchain.balance_of(payee) == 7
