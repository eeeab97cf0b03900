"""Settle EIP-3009 authorizations on the local chain ourselves: one per transaction, or a batch.

A test that scripts what a settler answers (a facilitator's word) still needs the chain
to agree with it: `settle_on_chain` does what a relayer (a facilitator, a gas wallet) does
with one authorization, and `settle_batch` what a batching facilitator or a multicall does,
several authorizations in ONE transaction through our BatchSettle contract
(contracts/BatchSettle.sol, compiled by scripts/build-token into BatchSettle.json).

Authorizations are the x402 wire dicts `sign_transfer_authorization` returns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eth_abi.abi import encode
from eth_account.signers.local import LocalAccount
from eth_utils.abi import function_signature_to_4byte_selector
from eth_utils.address import to_checksum_address

from x402srv.devchain.chain import Devchain
from x402srv.devchain.errors import DevchainError
from x402srv.devchain.rpc import RpcClient
from x402srv.devchain.token import encode_call, load_artifact

__all__ = ["BATCH_ARTIFACT_FILE", "deploy_batch_settle", "settle_batch", "settle_on_chain"]

BATCH_ARTIFACT_FILE = "BatchSettle.json"
_TRANSFER = "transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)"
_AUTHORIZATION_TUPLE = "(address,address,uint256,uint256,uint256,bytes32,bytes)"
_SETTLE_ALL = f"settleAll(address,{_AUTHORIZATION_TUPLE}[])"

#: (x402 wire authorization, 0x signature)
Signed = tuple[Mapping[str, str], str]


def _arguments(authorization: Mapping[str, str], signature: str) -> tuple[Any, ...]:
    return (
        to_checksum_address(authorization["from"]),
        to_checksum_address(authorization["to"]),
        int(authorization["value"]),
        int(authorization["validAfter"]),
        int(authorization["validBefore"]),
        bytes.fromhex(authorization["nonce"].removeprefix("0x")),
        bytes.fromhex(signature.removeprefix("0x")),
    )


def settle_on_chain(
    chain: Devchain, relayer: LocalAccount, authorization: Mapping[str, str], signature: str
) -> str:
    """Submit one ``transferWithAuthorization`` from ``relayer``; return its (lowercase) txHash.

    Raises ``RpcError`` with the token's revert string if the token refuses it.
    """
    data = encode_call(_TRANSFER, *_arguments(authorization, signature))
    receipt = chain.rpc.send_transaction(relayer, to=chain.token.address, data=data)
    return receipt.tx_hash.lower()


def deploy_batch_settle(rpc: RpcClient, deployer: LocalAccount) -> str:
    """Deploy a BatchSettle contract; return its address (anyone may call it)."""
    artifact = load_artifact(BATCH_ARTIFACT_FILE)
    receipt = rpc.send_transaction(deployer, to=None, data=artifact.bytecode)
    if receipt.contract_address is None:
        raise DevchainError(f"deployment {receipt.tx_hash} created no contract")
    return receipt.contract_address


def settle_batch(
    chain: Devchain, relayer: LocalAccount, batch: str, authorizations: Sequence[Signed]
) -> str:
    """Settle every authorization in ONE transaction through the BatchSettle at ``batch``.

    All or nothing: one refused authorization reverts the whole transaction.
    """
    items = [_arguments(authorization, signature) for authorization, signature in authorizations]
    data = function_signature_to_4byte_selector(_SETTLE_ALL) + encode(
        ["address", f"{_AUTHORIZATION_TUPLE}[]"],
        [to_checksum_address(chain.token.address), items],
    )
    receipt = chain.rpc.send_transaction(relayer, to=batch, data=data)
    return receipt.tx_hash.lower()
