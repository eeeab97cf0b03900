"""Contract wallets' signatures, checked on-chain through the network's RPC.

EIP-1271: ``isValidSignature(bytes32 hash, bytes signature)`` on the wallet
answers the magic value ``0x1626ba7e`` (an ``eth_call`` at the latest block).
A revert or any other answer is "not valid"; a node that does not answer is
``ChainUnavailable`` (the caller says 503, never "valid").
"""

from __future__ import annotations

from typing import Final

from eth_abi.abi import encode

from x402srv.settlement.chain import ChainReader, ChainUnavailable

__all__ = ["EIP6492_SUFFIX", "contract_signature_valid"]

#: How an EIP-6492 signature (a wallet not deployed yet) ends.
EIP6492_SUFFIX: Final = bytes.fromhex("6492" * 16)
_IS_VALID_SIGNATURE: Final = "1626ba7e"  # isValidSignature(bytes32,bytes), also its magic value


async def _eth_call(chain: ChainReader, call: dict[str, str]) -> str | None:
    """The call's return data, or None when it reverted."""
    try:
        result = await chain.call("eth_call", [call, "latest"])
    except ChainUnavailable as error:
        if "revert" in str(error).lower():
            return None
        raise
    if not isinstance(result, str) or not result.startswith("0x"):
        raise ChainUnavailable("eth_call: malformed RPC answer")
    return result


async def contract_signature_valid(
    chain: ChainReader, address: str, digest: bytes, signature: bytes
) -> bool:
    """Whether the contract wallet at ``address`` signed ``digest`` (EIP-1271)."""
    if signature.endswith(EIP6492_SUFFIX):
        return False  # a counterfactual wallet's signature: not accepted yet
    data = "0x" + _IS_VALID_SIGNATURE + encode(["bytes32", "bytes"], [digest, signature]).hex()
    result = await _eth_call(chain, {"to": address, "data": data})
    return result is not None and result[2:10] == _IS_VALID_SIGNATURE
