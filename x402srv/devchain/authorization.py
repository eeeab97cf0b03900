"""Sign EIP-3009 authorizations for the devchain token, the way x402 buyers do.

`sign_transfer_authorization` produces the same typed data, signature encoding and
authorization dict as the official x402 SDK's exact-EVM client (decimal strings for
numbers, 0x-hex for the 32-byte nonce), so tests can build payment payloads without the
SDK and the two stay interchangeable.
"""

from __future__ import annotations

import secrets
from typing import Any

from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from x402srv.devchain.token import TokenInfo

_AUTHORIZATION_FIELDS = [
    {"name": "from", "type": "address"},
    {"name": "to", "type": "address"},
    {"name": "value", "type": "uint256"},
    {"name": "validAfter", "type": "uint256"},
    {"name": "validBefore", "type": "uint256"},
    {"name": "nonce", "type": "bytes32"},
]

_DOMAIN_FIELDS = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]


def new_nonce() -> bytes:
    """A random EIP-3009 nonce: uniqueness per payer is all the contract requires."""
    return secrets.token_bytes(32)


def sign_transfer_authorization(
    account: LocalAccount,
    token: TokenInfo,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes | str | None = None,
) -> tuple[str, dict[str, str]]:
    """Sign a TransferWithAuthorization; return (0x signature, x402 authorization dict).

    The dict has the x402 wire keys: from, to, value, validAfter, validBefore (decimal
    strings) and nonce (0x + 64 hex). A None nonce draws a random one.
    """
    return _sign_authorization(
        "TransferWithAuthorization", account, token, to, value, valid_after, valid_before, nonce
    )


def sign_receive_authorization(
    account: LocalAccount,
    token: TokenInfo,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes | str | None = None,
) -> tuple[str, dict[str, str]]:
    """Like sign_transfer_authorization, for receiveWithAuthorization (payee submits)."""
    return _sign_authorization(
        "ReceiveWithAuthorization", account, token, to, value, valid_after, valid_before, nonce
    )


def sign_cancel_authorization(account: LocalAccount, token: TokenInfo, nonce: bytes | str) -> str:
    """Sign a CancelAuthorization for `nonce`; return the 0x signature."""
    message = {"authorizer": account.address, "nonce": _nonce_bytes(nonce)}
    fields = [{"name": "authorizer", "type": "address"}, {"name": "nonce", "type": "bytes32"}]
    return _sign(account, token, "CancelAuthorization", fields, message)


def _sign_authorization(
    primary_type: str,
    account: LocalAccount,
    token: TokenInfo,
    to: str,
    value: int,
    valid_after: int,
    valid_before: int,
    nonce: bytes | str | None,
) -> tuple[str, dict[str, str]]:
    nonce_bytes = new_nonce() if nonce is None else _nonce_bytes(nonce)
    message = {
        "from": account.address,
        "to": to_checksum_address(to),
        "value": value,
        "validAfter": valid_after,
        "validBefore": valid_before,
        "nonce": nonce_bytes,
    }
    signature = _sign(account, token, primary_type, _AUTHORIZATION_FIELDS, message)
    authorization = {
        "from": account.address,
        "to": to_checksum_address(to),
        "value": str(value),
        "validAfter": str(valid_after),
        "validBefore": str(valid_before),
        "nonce": "0x" + nonce_bytes.hex(),
    }
    return signature, authorization


def _sign(
    account: LocalAccount,
    token: TokenInfo,
    primary_type: str,
    fields: list[dict[str, str]],
    message: dict[str, Any],
) -> str:
    typed_data = {
        "types": {"EIP712Domain": _DOMAIN_FIELDS, primary_type: fields},
        "primaryType": primary_type,
        "domain": {
            "name": token.name,
            "version": token.version,
            "chainId": token.chain_id,
            "verifyingContract": token.address,
        },
        "message": message,
    }
    signed = account.sign_message(encode_typed_data(full_message=typed_data))
    return "0x" + bytes(signed.signature).hex()


def _nonce_bytes(nonce: bytes | str) -> bytes:
    raw = bytes.fromhex(nonce.removeprefix("0x")) if isinstance(nonce, str) else nonce
    if len(raw) != 32:
        raise ValueError(f"an EIP-3009 nonce is 32 bytes, got {len(raw)}")
    return raw
