"""EIP-712 digest and signer recovery for EIP-3009 ``TransferWithAuthorization``.

Hand-rolled for the one fixed type instead of going through a generic typed-data
encoder: every field is a static 32-byte word, the domain separator is computed
once per server, and recovery uses coincurve directly. Tests check the digest
against eth_account's ``encode_typed_data``.

Recovery follows the token contracts (USDC's ``ECRecover``): ``v`` must be 27 or
28 and ``s`` in the lower half of the curve order, so a signature we accept is
one the chain accepts too.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from coincurve import PublicKey
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

__all__ = ["Eip3009Domain", "TransferAuthorization", "recover_signer"]

_DOMAIN_TYPEHASH = keccak(
    text="EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
_TRANSFER_TYPEHASH = keccak(
    text="TransferWithAuthorization(address from,address to,uint256 value,"
    "uint256 validAfter,uint256 validBefore,bytes32 nonce)"
)
_SECP256K1_HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0
_UINT256_MAX = 2**256 - 1


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def _address_word(address: str) -> bytes:
    return bytes(12) + bytes.fromhex(address[2:])


@dataclass(frozen=True)
class Eip3009Domain:
    """The token's EIP-712 domain, always built from config (never from a payload).

    Not slotted: ``separator`` is computed once and cached on the instance.
    """

    name: str
    version: str
    chain_id: int
    verifying_contract: str

    @cached_property
    def separator(self) -> bytes:
        return keccak(
            _DOMAIN_TYPEHASH
            + keccak(text=self.name)
            + keccak(text=self.version)
            + _word(self.chain_id)
            + _address_word(self.verifying_contract)
        )


@dataclass(frozen=True, slots=True)
class TransferAuthorization:
    payer: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: bytes

    def digest(self, domain: Eip3009Domain) -> bytes:
        for number in (self.value, self.valid_after, self.valid_before):
            if not 0 <= number <= _UINT256_MAX:
                raise ValueError("uint256 out of range")
        struct_hash = keccak(
            _TRANSFER_TYPEHASH
            + _address_word(self.payer)
            + _address_word(self.to)
            + _word(self.value)
            + _word(self.valid_after)
            + _word(self.valid_before)
            + self.nonce
        )
        return keccak(b"\x19\x01" + domain.separator + struct_hash)


def recover_signer(digest: bytes, signature: bytes) -> str | None:
    """The checksummed address that signed ``digest``, or None if the chain would refuse it."""
    if len(signature) != 65:
        return None
    r, s, v = signature[:32], signature[32:64], signature[64]
    if v not in (27, 28) or int.from_bytes(s, "big") > _SECP256K1_HALF_N:
        return None
    try:
        public = PublicKey.from_signature_and_message(r + s + bytes([v - 27]), digest, hasher=None)
    except Exception:  # coincurve raises plain Exception for unrecoverable input
        return None
    address = keccak(public.format(compressed=False)[1:])[-20:]
    return str(to_checksum_address(address))
