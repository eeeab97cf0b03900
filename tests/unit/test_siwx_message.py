"""Our EIP-4361 text is the official SDK's, byte for byte (docs/sign-in-with-x.md).

The server rebuilds the message a buyer signed from the header's fields; if a
single character differed, every official client's signature would fail.
"""

from __future__ import annotations

import base64
import json

import pytest
from x402.extensions.sign_in_with_x import SIWxPayload, create_siwx_message

from x402srv.errors import SiwxInvalid
from x402srv.wire.siwx import parse_header, siwe_message

BASE = {
    "domain": "pay.example.com",
    "address": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "uri": "https://pay.example.com/x402/access",
    "version": "1",
    "chainId": "eip155:8453",
    "type": "eip191",
    "nonce": "0123456789abcdef" + "ab" * 16,
    "issuedAt": "2026-11-28T10:00:00.000Z",
    "signature": "0x" + "11" * 65,
}


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"statement": "Sign in to get back what this wallet bought"},
        {"expirationTime": "2026-11-28T10:05:00.000Z", "resources": [BASE["uri"]]},
        {"notBefore": "2026-11-28T10:00:00Z", "requestId": "r-1", "resources": []},
        {"statement": "s", "resources": ["https://a.example/1", "https://b.example/2"]},
    ],
)
def test_siwx_message_is_the_sdks(extra: dict[str, object]) -> None:
    document = {**BASE, **extra}
    header = base64.b64encode(json.dumps(document).encode()).decode()
    ours = siwe_message(parse_header(header))
    sdk = SIWxPayload.model_validate(document)
    assert ours == create_siwx_message(sdk, sdk.address)


@pytest.mark.parametrize(
    "change",
    [
        {"statement": "two\nlines"},  # a newline would forge another field of the message
        {"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"},
        {"nonce": "short"},
        {"address": "0x1234"},
        {"signature": "0xZZ"},
    ],
)
def test_siwx_header_of_the_wrong_form_is_400(change: dict[str, object]) -> None:
    header = base64.b64encode(json.dumps({**BASE, **change}).encode()).decode()
    with pytest.raises(SiwxInvalid):
        parse_header(header)
