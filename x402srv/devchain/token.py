"""Deploy and use the EIP3009Token (a USDC look-alike) on the local chain.

The contract is compiled ahead of time by `scripts/build-token` into EIP3009Token.json,
shipped inside this package so the demo runs without a Solidity compiler. Calls are
ABI-encoded by hand with eth_abi: the core package does not depend on web3.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from eth_abi.abi import decode, encode
from eth_account.signers.local import LocalAccount
from eth_utils.abi import function_signature_to_4byte_selector
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from x402srv.devchain.errors import DevchainError
from x402srv.devchain.rpc import Receipt, RpcClient

ARTIFACT_FILE = "EIP3009Token.json"
TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()


@dataclass(frozen=True)
class TokenArtifact:
    """A compiled contract as written by scripts/build-token (the token's, or another)."""

    contract_name: str
    abi: list[dict[str, Any]]
    bytecode: bytes
    solc_version: str
    source_sha256: str


@dataclass(frozen=True)
class TokenInfo:
    """A deployed token: everything a payer needs to build its EIP-712 domain."""

    address: str
    name: str
    version: str
    decimals: int
    chain_id: int

    @property
    def network(self) -> str:
        """CAIP-2 network id, as x402 v2 names chains."""
        return f"eip155:{self.chain_id}"

    @property
    def eip712_extra(self) -> dict[str, str]:
        """The `extra` of x402 PaymentRequirements: the domain name and version to sign."""
        return {"name": self.name, "version": self.version}


@dataclass(frozen=True)
class TransferLog:
    """One decoded ERC-20 Transfer event."""

    tx_hash: str
    block_number: int
    from_address: str
    to: str
    value: int


@cache
def load_artifact(file: str = ARTIFACT_FILE) -> TokenArtifact:
    """Read an artifact shipped with the package (cached: it never changes at runtime).

    The token's by default; ``"BatchSettle.json"`` is the other contract the build makes.
    """
    text = resources.files("x402srv.devchain").joinpath(file).read_text("utf-8")
    raw = json.loads(text)
    return TokenArtifact(
        contract_name=raw["contractName"],
        abi=raw["abi"],
        bytecode=bytes.fromhex(raw["bytecode"].removeprefix("0x")),
        solc_version=raw["solcVersion"],
        source_sha256=raw["sourceSha256"],
    )


def encode_call(signature: str, *args: Any) -> bytes:
    """Calldata for `signature` (e.g. "mint(address,uint256)"); flat argument types only."""
    inner = signature[signature.index("(") + 1 : -1]
    types = inner.split(",") if inner else []
    return function_signature_to_4byte_selector(signature) + encode(types, list(args))


def deploy_token(
    rpc: RpcClient,
    deployer: LocalAccount,
    name: str = "USD Coin",
    version: str = "2",
    decimals: int = 6,
) -> TokenInfo:
    """Deploy a fresh token; the deployer becomes its owner (the only minter).

    Defaults match USDC's EIP-712 domain on Base ("USD Coin", "2", 6 decimals) so payloads
    look like real-chain ones.
    """
    artifact = load_artifact()
    data = artifact.bytecode + encode(["string", "string", "uint8"], [name, version, decimals])
    receipt = rpc.send_transaction(deployer, to=None, data=data)
    if receipt.contract_address is None:
        raise DevchainError(f"deployment {receipt.tx_hash} created no contract")
    return TokenInfo(
        address=receipt.contract_address,
        name=name,
        version=version,
        decimals=decimals,
        chain_id=rpc.chain_id(),
    )


def mint(rpc: RpcClient, token: TokenInfo, owner: LocalAccount, to: str, amount: int) -> Receipt:
    """Create `amount` atomic units for `to`; `owner` must be the deployer."""
    data = encode_call("mint(address,uint256)", to_checksum_address(to), amount)
    return rpc.send_transaction(owner, to=token.address, data=data)


def balance_of(rpc: RpcClient, token: TokenInfo, address: str) -> int:
    data = encode_call("balanceOf(address)", to_checksum_address(address))
    (balance,) = decode(["uint256"], rpc.eth_call(token.address, data))
    return int(balance)


def authorization_state(
    rpc: RpcClient, token: TokenInfo, authorizer: str, nonce: bytes | str
) -> bool:
    """True once the EIP-3009 nonce was used or canceled: how tests observe a settlement."""
    nonce_bytes = bytes.fromhex(nonce.removeprefix("0x")) if isinstance(nonce, str) else nonce
    data = encode_call(
        "authorizationState(address,bytes32)", to_checksum_address(authorizer), nonce_bytes
    )
    (used,) = decode(["bool"], rpc.eth_call(token.address, data))
    return bool(used)


def transfer_logs(
    rpc: RpcClient,
    token: TokenInfo,
    *,
    to: str | None = None,
    from_address: str | None = None,
    from_block: int = 0,
) -> list[TransferLog]:
    """Transfer events of the token, optionally filtered by recipient and/or sender.

    This is how tests check what actually moved on-chain, independent of what the server
    under test reports.
    """
    topics = [TRANSFER_TOPIC, _address_topic(from_address), _address_topic(to)]
    logs = rpc.get_logs(address=token.address, topics=topics, from_block=from_block)
    return [_decode_transfer(log) for log in logs]


def _address_topic(address: str | None) -> str | None:
    if address is None:
        return None
    return "0x" + bytes.fromhex(address.removeprefix("0x")).rjust(32, b"\0").hex()


def _decode_transfer(log: dict[str, Any]) -> TransferLog:
    topics = log["topics"]
    return TransferLog(
        tx_hash=log["transactionHash"],
        block_number=int(log["blockNumber"], 16),
        from_address=to_checksum_address("0x" + topics[1][-40:]),
        to=to_checksum_address("0x" + topics[2][-40:]),
        value=int(log["data"], 16),
    )
