"""Payments that are wrong in one way each, for the HTTP and A2A bad-input tests.

An ``Attack`` says how its payment is signed (``sign``), edited after signing
(``mutate``) or encoded (``raw``), and which problem it must get back.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.devchain import TokenInfo
from x402srv.testing.buyers import encode_payment, signed_payment

#: secp256k1's group order: ``N - s`` is the other, high-s signature of the same message.
N = 115792089237316195423570985008687907852837564279074904382605163141518161494337


@dataclass(frozen=True)
class Attack:
    """One way to get a payment wrong; ``mutate`` edits a valid payload dict in place."""

    name: str
    status: int
    code: str
    reason: str | None = None
    sign: dict[str, Any] | None = None
    mutate: Callable[[dict[str, Any]], None] | None = None
    raw: Callable[[dict[str, Any]], str] | None = None


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(payload: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = payload
        for part in parents:
            node = node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()


def _high_s(payload: dict[str, Any]) -> None:
    signature = bytes.fromhex(payload["payload"]["signature"][2:])
    r, s, v = signature[:32], int.from_bytes(signature[32:64], "big"), signature[64]
    flipped = r + (N - s).to_bytes(32, "big") + bytes([55 - v])  # 27 <-> 28
    payload["payload"]["signature"] = "0x" + flipped.hex()


def _truncated(payload: dict[str, Any]) -> str:
    return encode_payment(payload)[:-40]


VALID_BEFORE_OK = 200  # seconds ahead: inside maxTimeoutSeconds (300) + 60

ATTACKS = [
    Attack(
        "wrong payTo",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_recipient_mismatch",
        sign={"to": "OTHER"},
    ),
    Attack(
        "amount under",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_authorization_value_mismatch",
        sign={"value": 99_999},
    ),
    Attack(
        "amount over",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_authorization_value_mismatch",
        sign={"value": 100_001},
    ),
    Attack(
        "accepted amount lowered",
        402,
        "PAYMENT_FAILED",
        "invalid_payment_requirements",
        sign={"value": 1},
        mutate=_set("accepted.amount", "1"),
    ),
    Attack(
        "wrong asset",
        402,
        "PAYMENT_FAILED",
        "invalid_payment_requirements",
        mutate=_set("accepted.asset", "0x" + "11" * 20),
    ),
    Attack(
        "wrong chain id",
        402,
        "PAYMENT_FAILED",
        "invalid_network",
        mutate=_set("accepted.network", "eip155:1"),
    ),
    Attack(
        "signed for another chain",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_signature",
        sign={"chain_id": 1},
    ),
    Attack(
        "signed for another token",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_signature",
        sign={"token_address": "0x" + "22" * 20},
    ),
    Attack(
        "signed by someone else",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_signature",
        sign={"signer": "OTHER"},
    ),
    Attack(
        "high-s signature",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_signature",
        mutate=_high_s,
    ),
    Attack(
        "validBefore too far ahead",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_authorization_valid_before",
        sign={"valid_before": 3600},
    ),
    Attack(
        "validBefore passed",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_authorization_valid_before",
        sign={"valid_before": -10},
    ),
    Attack(
        "validAfter in the future",
        402,
        "PAYMENT_FAILED",
        "invalid_exact_evm_payload_authorization_valid_after",
        sign={"valid_after": 120},
    ),
    Attack("x402Version 1", 400, "INVALID_REQUEST", mutate=_set("x402Version", 1)),
    Attack("missing signature", 400, "INVALID_REQUEST", mutate=_set("payload.signature", _DELETE)),
    Attack(
        "short nonce", 400, "INVALID_REQUEST", mutate=_set("payload.authorization.nonce", "0x1234")
    ),
    Attack(
        "value not a number",
        400,
        "INVALID_REQUEST",
        mutate=_set("payload.authorization.value", "1e5"),
    ),
    Attack(
        "unknown challengeId",
        400,
        "INVALID_REQUEST",
        mutate=_set("accepted.extra.challengeId", "0b3f6b7e-5d0c-4b7e-9a51-3c2f1d0e9a88"),
    ),
    Attack(
        "malformed challengeId",
        400,
        "INVALID_REQUEST",
        mutate=_set("accepted.extra.challengeId", "nope"),
    ),
    Attack("truncated header", 400, "INVALID_REQUEST", raw=_truncated),
]


def attack_payment(
    buyer: LocalAccount, token: TokenInfo, attack: Attack, accepted: dict[str, Any]
) -> dict[str, Any]:
    """The attack's payment: signed with its changes, then mutated (shared with A2A)."""
    now = int(time.time())
    sign = dict(attack.sign or {})
    kwargs: dict[str, Any] = {"valid_before": now + VALID_BEFORE_OK}
    if "to" in sign:
        kwargs["to"] = Account.create().address
    if "value" in sign:
        kwargs["value"] = sign["value"]
    if "valid_before" in sign:
        kwargs["valid_before"] = now + sign["valid_before"]
    if "valid_after" in sign:
        kwargs["valid_after"] = now + sign["valid_after"]
    if "signer" in sign:
        kwargs["sign_with"] = Account.create()
    if "chain_id" in sign:
        kwargs["sign_token"] = replace(token, chain_id=sign["chain_id"])
    if "token_address" in sign:
        kwargs["sign_token"] = replace(token, address=Account.create().address)
    payload = signed_payment(buyer, token, copy.deepcopy(accepted), **kwargs)
    if attack.mutate:
        attack.mutate(payload)
    return payload
