"""The one call this plugin makes, and what its reverts mean in x402 terms.

``transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s)``
is encoded by hand with eth_abi: one fixed signature needs no contract object.
Revert strings are USDC's (FiatTokenV2), which every EIP-3009 token x402
supports copies; the mapping follows the x402 SDK's facilitator so a buyer
sees the same reason from us as from a facilitator.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from eth_abi.abi import encode
from eth_utils.abi import function_signature_to_4byte_selector
from eth_utils.address import to_checksum_address

from x402srv.interfaces import Authorization

__all__ = [
    "DETAILS",
    "REASON_INSUFFICIENT_BALANCE",
    "REASON_INVALID_SIGNATURE",
    "REASON_NONCE_USED",
    "REASON_TRANSACTION_FAILED",
    "REASON_UNAVAILABLE",
    "REASON_VALID_AFTER",
    "REASON_VALID_BEFORE",
    "MalformedSignature",
    "Revert",
    "RevertKind",
    "classify_revert",
    "transfer_calldata",
]

REASON_INVALID_SIGNATURE = "invalid_exact_evm_payload_signature"
REASON_INSUFFICIENT_BALANCE = "invalid_exact_evm_insufficient_balance"
REASON_VALID_BEFORE = "invalid_exact_evm_payload_authorization_valid_before"
REASON_VALID_AFTER = "invalid_exact_evm_payload_authorization_valid_after"
REASON_NONCE_USED = "invalid_exact_evm_nonce_already_used"
REASON_TRANSACTION_FAILED = "transaction_failed"
#: The x402 SDK's reason when settling itself could not be attempted (node down,
#: gas wallet empty, fees above the cap): nothing was sent, the buyer may retry.
REASON_UNAVAILABLE = "unexpected_settle_error"

#: What the buyer reads (``Rejected.detail``) for each refusal the token gives.
DETAILS = {
    REASON_INVALID_SIGNATURE: "The authorization's signature does not match its payer.",
    REASON_INSUFFICIENT_BALANCE: "The payer's token balance is too low for this payment.",
    REASON_VALID_BEFORE: "The authorization has expired.",
    REASON_VALID_AFTER: "The authorization is not valid yet.",
    REASON_NONCE_USED: "This authorization was already used or cancelled.",
    REASON_TRANSACTION_FAILED: "The token contract refused the transfer; nothing moved.",
}

#: transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s)
_ARG_TYPES = [
    "address",
    "address",
    "uint256",
    "uint256",
    "uint256",
    "bytes32",
    "uint8",
    "bytes32",
    "bytes32",
]
_SELECTOR = function_signature_to_4byte_selector(
    f"transferWithAuthorization({','.join(_ARG_TYPES)})"
)


class MalformedSignature(ValueError):
    """The signature is not 65 bytes of hex: it cannot be split into v, r, s."""


def transfer_calldata(auth: Authorization) -> bytes:
    """ABI-encoded call data for the v, r, s overload (USDC's original one)."""
    try:
        signature = bytes.fromhex(auth.signature.removeprefix("0x"))
        nonce = bytes.fromhex(auth.nonce.removeprefix("0x"))
    except ValueError:
        raise MalformedSignature("signature or nonce is not hex") from None
    if len(signature) != 65 or len(nonce) != 32:
        raise MalformedSignature("expected a 65-byte signature and a 32-byte nonce")
    v = signature[64] + 27 if signature[64] in (0, 1) else signature[64]
    args = [
        to_checksum_address(auth.payer),
        to_checksum_address(auth.to),
        auth.value,
        auth.valid_after,
        auth.valid_before,
        nonce,
        v,
        signature[:32],
        signature[32:64],
    ]
    return _SELECTOR + encode(_ARG_TYPES, args)


class RevertKind(Enum):
    USED = "used"
    """The nonce is spent (by us earlier, by someone else, or cancelled): ask the chain."""
    UNSURE = "unsure"
    """Expired, not yet valid, or a reason we do not know. USDC checks pausing,
    blacklists and the time window before the nonce, so the authorization may be
    spent already: ask the chain before refusing."""
    DEFINITE = "definite"
    """Bad signature or balance: the token found the nonce unused, then refused."""


@dataclass(frozen=True, slots=True)
class Revert:
    kind: RevertKind
    reason: str


def classify_revert(message: str) -> Revert:
    """Map a revert message (``execution reverted: FiatTokenV2: ...``) to an x402 reason."""
    text = message.lower()
    if "authorization is used" in text or "authorizationalreadyused" in text:
        return Revert(RevertKind.USED, REASON_NONCE_USED)
    if "authorization is expired" in text or "authorizationexpired" in text:
        return Revert(RevertKind.UNSURE, REASON_VALID_BEFORE)
    if "authorization is not yet valid" in text or "authorizationnotyetvalid" in text:
        return Revert(RevertKind.UNSURE, REASON_VALID_AFTER)
    if "exceeds balance" in text or "erc20insufficientbalance" in text:
        return Revert(RevertKind.DEFINITE, REASON_INSUFFICIENT_BALANCE)
    if "invalid signature" in text or "signermismatch" in text:
        return Revert(RevertKind.DEFINITE, REASON_INVALID_SIGNATURE)
    return Revert(RevertKind.UNSURE, REASON_TRANSACTION_FAILED)
