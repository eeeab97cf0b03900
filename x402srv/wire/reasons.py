"""The x402 reason strings, in one place (``402 PAYMENT_FAILED`` carries one as ``reason``).

They are the official SDK's ``invalidReason``/``errorReason`` values, so a
buyer's client reads ours exactly as it reads a facilitator's. A ``Reason`` is
a ``str``: settlers and facilitator answers may use any other x402 reason too.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason"]


class Reason(StrEnum):
    # the payment against the offered requirement (docs/protocol/flow.md, step 5)
    INVALID_PAYMENT_REQUIREMENTS = "invalid_payment_requirements"
    UNSUPPORTED_SCHEME = "unsupported_scheme"
    INVALID_NETWORK = "invalid_network"
    RECIPIENT_MISMATCH = "invalid_exact_evm_payload_recipient_mismatch"
    VALUE_MISMATCH = "invalid_exact_evm_payload_authorization_value_mismatch"
    VALID_AFTER = "invalid_exact_evm_payload_authorization_valid_after"
    VALID_BEFORE = "invalid_exact_evm_payload_authorization_valid_before"
    INVALID_SIGNATURE = "invalid_exact_evm_payload_signature"
    # what the token (or a facilitator) says when settling
    INSUFFICIENT_BALANCE = "invalid_exact_evm_insufficient_balance"
    NONCE_USED = "invalid_exact_evm_nonce_already_used"
    TRANSACTION_FAILED = "transaction_failed"
    #: Settling could not be attempted (node down, gas wallet empty, fees above the
    #: cap, facilitator unreachable): nothing was sent, the buyer may retry.
    UNEXPECTED_SETTLE_ERROR = "unexpected_settle_error"
    UNEXPECTED_VERIFY_ERROR = "unexpected_verify_error"
