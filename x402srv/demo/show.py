"""How the demo prints things: short hex, token amounts, and x402 headers in one line each.

A first-time reader should see what matters in an offer or a payment (plan, price,
who pays whom, on which chain) without reading base64. Tokens and signatures are
shortened: the demo shows that they exist and what they carry, never a credential
someone could copy from a screen recording of a real seller.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

from x402srv.wire.offers import rfc3339

__all__ = [
    "decode_header",
    "describe_offer",
    "describe_payment",
    "json_lines",
    "short",
    "token_amount",
]


def short(value: str, head: int = 6, tail: int = 4) -> str:
    """``0x3C44Cd…93BC``: enough to recognise a value, not enough to reuse it."""
    if len(value) <= head + tail + 1:
        return value
    return f"{value[:head]}…{value[-tail:]}"


def token_amount(atomic: int, decimals: int = 6) -> str:
    """Atomic units as a decimal with at least two places: 100000 -> ``0.10``."""
    value = Decimal(atomic).scaleb(-decimals)
    text = format(value.normalize(), "f")
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def decode_header(value: str) -> dict[str, Any]:
    """An x402 header: standard base64 of a JSON object."""
    decoded: dict[str, Any] = json.loads(base64.b64decode(value))
    return decoded


def describe_offer(requirement: dict[str, Any], decimals: int = 6) -> list[str]:
    """One requirement of a 402, in two lines: what is sold for how much, and to whom."""
    extra = requirement.get("extra", {})
    amount = int(requirement["amount"])
    return [
        f"plan {extra.get('planId')}: {token_amount(amount, decimals)} USDC = {amount} units"
        f" of token {short(requirement['asset'])} on {requirement['network']}",
        f"payTo {short(requirement['payTo'])}, scheme {requirement['scheme']}, "
        f"maxTimeoutSeconds {requirement['maxTimeoutSeconds']}",
    ]


def describe_payment(payload: dict[str, Any]) -> list[str]:
    """The signed EIP-3009 authorization of a ``PAYMENT-SIGNATURE`` header, in two lines."""
    authorization = payload["payload"]["authorization"]
    return [
        f"transferWithAuthorization from {short(authorization['from'])} to "
        f"{short(authorization['to'])}, value {authorization['value']},",
        f"valid until {rfc3339(int(authorization['validBefore']))}, nonce "
        f"{short(authorization['nonce'])}, signature {short(payload['payload']['signature'])}",
    ]


def json_lines(document: dict[str, Any], width: int = 84) -> list[str]:
    """A JSON object on as few lines as fit ``width``, broken between members only."""
    members = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in document.items()]
    lines: list[str] = []
    current = "{"
    for index, member in enumerate(members):
        piece = member + ("}" if index == len(members) - 1 else ", ")
        if len(current) + len(piece) > width and current != "{":
            lines.append(current.rstrip())
            current = " "
        current += piece
    lines.append(current if members else "{}")
    return lines
