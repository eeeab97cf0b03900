"""Contract wallets' signatures, checked on-chain through the network's RPC.

EIP-1271: ``isValidSignature(bytes32 hash, bytes signature)`` on the wallet
answers the magic value ``0x1626ba7e`` (an ``eth_call`` at the latest block).

EIP-6492, a wallet not deployed yet: its signature is
``abi.encode(factory, factoryCalldata, innerSignature)`` followed by a 32-byte
suffix. The check is the ERC's deployless one (what viem, ethers and siwe do):
the creation code of our validator (``contracts/UniversalSigValidator.sol``,
built by ``scripts/build-token``) with the signer, the hash and the signature
as its constructor's arguments, sent as an ``eth_call`` without a ``to``. The
validator deploys the wallet through its factory inside that call, asks it
through EIP-1271 and returns one byte; nothing is written on-chain.

Each call may burn at most ``GAS_CAP`` gas, so a sign-in cannot make the seller's
RPC run an arbitrarily long computation. A revert, running out of that gas or
any other answer is "not valid"; a node that does not answer is
``ChainUnavailable`` (the caller says 503, never "valid").
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Final

from eth_abi.abi import encode

from x402srv.settlement.chain import ChainReader, ChainUnavailable

__all__ = ["EIP6492_SUFFIX", "GAS_CAP", "contract_signature_valid"]

#: How an EIP-6492 signature (a wallet not deployed yet) ends.
EIP6492_SUFFIX: Final = bytes.fromhex("6492" * 16)
_IS_VALID_SIGNATURE: Final = "1626ba7e"  # isValidSignature(bytes32,bytes), also its magic value
_VALIDATOR_ARTIFACT: Final = "UniversalSigValidator.json"
#: Gas one check may use: a wallet's deployment and a passkey's P-256 check fit well below it.
GAS_CAP: Final = 5_000_000
#: How nodes word "the call failed" (not "I could not run it"): reverts, and running out of gas
#: (anvil: "EVM error OutOfGas"; geth: "out of gas", "gas required exceeds allowance").
_CALL_FAILED: Final = ("revert", "out of gas", "outofgas", "gas required exceeds")


@cache
def _validator_bytecode() -> bytes:
    """The ERC-6492 validator's creation code, shipped with the package."""
    text = resources.files("x402srv.settlement").joinpath(_VALIDATOR_ARTIFACT).read_text("utf-8")
    return bytes.fromhex(json.loads(text)["bytecode"].removeprefix("0x"))


async def _eth_call(chain: ChainReader, call: dict[str, str], gas_cap: int) -> str | None:
    """The call's return data, or None when it failed (reverted, ran out of gas)."""
    try:
        result = await chain.call("eth_call", [{**call, "gas": hex(gas_cap)}, "latest"])
    except ChainUnavailable as error:
        message = str(error).lower()
        if any(failed in message for failed in _CALL_FAILED):
            return None
        raise
    if not isinstance(result, str) or not result.startswith("0x"):
        raise ChainUnavailable("eth_call: malformed RPC answer")
    return result


async def contract_signature_valid(
    chain: ChainReader, address: str, digest: bytes, signature: bytes, *, gas_cap: int = GAS_CAP
) -> bool:
    """Whether the contract wallet at ``address`` (deployed or not yet) signed ``digest``."""
    if signature.endswith(EIP6492_SUFFIX):
        arguments = encode(["address", "bytes32", "bytes"], [address, digest, signature])
        deployless = "0x" + (_validator_bytecode() + arguments).hex()
        result = await _eth_call(chain, {"data": deployless}, gas_cap)
        return result == "0x01"
    data = "0x" + _IS_VALID_SIGNATURE + encode(["bytes32", "bytes"], [digest, signature]).hex()
    result = await _eth_call(chain, {"to": address, "data": data}, gas_cap)
    return result is not None and result[2:10] == _IS_VALID_SIGNATURE
