"""The a2a-x402 extension (spec v0.2, Standalone flow) with x402 v2 objects.

Metadata keys and payment statuses of the extension (its section 7), which
``X-A2A-Extensions`` values activate it (section 8), and THE table from our
x402 reason strings (``PaymentFailed.reason``: the pipeline's checks and every
settler's ``Rejected.reason``) to the extension's error codes (section 9.1).
A reason the table does not know is ``SETTLEMENT_FAILED``, the extension's
catch-all; the reason itself stays in the failed receipt's ``errorReason``.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final

from x402srv.wire.card import X402_EXTENSION_URI
from x402srv.wire.reasons import Reason

__all__ = [
    "ERROR_KEY",
    "EXTENSION_HEADERS",
    "PAYLOAD_KEY",
    "REASON_CODES",
    "RECEIPTS_KEY",
    "REQUIRED_KEY",
    "STATUS_KEY",
    "X402_EXTENSION_URI",
    "ExtensionError",
    "PaymentStatus",
    "activated_extensions",
    "error_code",
]

STATUS_KEY: Final = "x402.payment.status"
REQUIRED_KEY: Final = "x402.payment.required"
PAYLOAD_KEY: Final = "x402.payment.payload"
RECEIPTS_KEY: Final = "x402.payment.receipts"
ERROR_KEY: Final = "x402.payment.error"

#: A2A 0.3 clients send ``X-A2A-Extensions``; newer ones ``A2A-Extensions``.
EXTENSION_HEADERS: Final = ("X-A2A-Extensions", "A2A-Extensions")


class PaymentStatus(StrEnum):
    REQUIRED = "payment-required"
    SUBMITTED = "payment-submitted"
    REJECTED = "payment-rejected"
    VERIFIED = "payment-verified"
    COMPLETED = "payment-completed"
    FAILED = "payment-failed"


class ExtensionError(StrEnum):
    INSUFFICIENT_FUNDS = "INSUFFICIENT_FUNDS"
    INVALID_SIGNATURE = "INVALID_SIGNATURE"
    EXPIRED_PAYMENT = "EXPIRED_PAYMENT"
    DUPLICATE_NONCE = "DUPLICATE_NONCE"
    NETWORK_MISMATCH = "NETWORK_MISMATCH"
    INVALID_AMOUNT = "INVALID_AMOUNT"
    SETTLEMENT_FAILED = "SETTLEMENT_FAILED"


_E = ExtensionError

#: x402 reason -> extension error code. "Amount" covers every way the payment does
#: not pay what was offered (value, recipient, asset, scheme or the accepted terms);
#: "expired" every way its validity window is wrong (too late, too early, too long).
REASON_CODES: Final[dict[str, ExtensionError]] = {
    Reason.INSUFFICIENT_BALANCE: _E.INSUFFICIENT_FUNDS,
    "insufficient_funds": _E.INSUFFICIENT_FUNDS,
    Reason.INVALID_SIGNATURE: _E.INVALID_SIGNATURE,
    "invalid_exact_evm_failed_to_verify_signature": _E.INVALID_SIGNATURE,
    "invalid_exact_evm_payload_undeployed_smart_wallet": _E.INVALID_SIGNATURE,
    Reason.VALID_BEFORE: _E.EXPIRED_PAYMENT,
    Reason.VALID_AFTER: _E.EXPIRED_PAYMENT,
    Reason.NONCE_USED: _E.DUPLICATE_NONCE,
    Reason.INVALID_NETWORK: _E.NETWORK_MISMATCH,
    "network_mismatch": _E.NETWORK_MISMATCH,
    "unsupported_network": _E.NETWORK_MISMATCH,
    Reason.VALUE_MISMATCH: _E.INVALID_AMOUNT,
    Reason.RECIPIENT_MISMATCH: _E.INVALID_AMOUNT,
    Reason.INVALID_PAYMENT_REQUIREMENTS: _E.INVALID_AMOUNT,
    Reason.UNSUPPORTED_SCHEME: _E.INVALID_AMOUNT,
    Reason.TRANSACTION_FAILED: _E.SETTLEMENT_FAILED,
    Reason.UNEXPECTED_SETTLE_ERROR: _E.SETTLEMENT_FAILED,
    Reason.UNEXPECTED_VERIFY_ERROR: _E.SETTLEMENT_FAILED,
}

#: The x402 reason a failed receipt names when the pipeline refused the payment as
#: already redeemed (409 TX_ALREADY_REDEEMED): the authorization's nonce is spent.
REDEEMED_REASON: Final = Reason.NONCE_USED


def error_code(reason: str) -> ExtensionError:
    return REASON_CODES.get(reason, ExtensionError.SETTLEMENT_FAILED)


def activated_extensions(header_values: Iterable[str]) -> list[str]:
    """The extensions a request asked for that this server activates (only x402's)."""
    requested = {
        item.strip() for value in header_values for item in value.split(",") if item.strip()
    }
    return [X402_EXTENSION_URI] if X402_EXTENSION_URI in requested else []
