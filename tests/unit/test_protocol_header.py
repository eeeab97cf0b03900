"""``PAYMENT-SIGNATURE`` decoding (docs/protocol/wire.md), ``encode_header`` and ``requirement``.

Every malformed header is ``InvalidRequest`` whose detail names the field but
never echoes what the client sent.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.configs import WALLET, custom_config
from x402srv.errors import InvalidRequest
from x402srv.wire.protocol import (
    MAX_HEADER_CHARS,
    PaymentPayload,
    decode_payment_header,
    encode_header,
    requirement,
)

MARKER = "deadbeefcafe"  # in the payload; must never show in an error detail
CHALLENGE_ID = "0b3f6b7e-5d0c-4b7e-9a51-3c2f1d0e9a88"
REQUEST_ID = "6f1f8a43-23a5-4c1e-8f0e-2d7b9c4e1a55"

AUTHORIZATION: dict[str, Any] = {
    "from": "0x" + "11" * 20,
    "to": WALLET,
    "value": "100000",
    "validAfter": "1699999940",
    "validBefore": "1700000120",
    "nonce": "0x" + "42" * 32,
}

DOCUMENT: dict[str, Any] = {
    "x402Version": 2,
    "payload": {"signature": "0x" + "ab" * 65, "authorization": AUTHORIZATION},
    "accepted": {
        "scheme": "exact",
        "network": "eip155:31337",
        "asset": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "amount": "100000",
        "payTo": WALLET,
        "maxTimeoutSeconds": 300,
        "extra": {
            "name": "USD Coin",
            "version": "2",
            "planId": "hourly",
            "challengeId": CHALLENGE_ID,
            "requestId": REQUEST_ID,
        },
    },
}


def document(**changes: Any) -> dict[str, Any]:
    """DOCUMENT with dotted-path changes; the value ``...`` deletes the key."""
    result = copy.deepcopy(DOCUMENT)
    for dotted, value in changes.items():
        *parents, key = dotted.split("__")
        target = result
        for parent in parents:
            target = target[parent]
        if value is ...:
            del target[key]
        else:
            target[key] = value
    return result


def b64(data: object, alphabet: str = "standard", padded: bool = True) -> str:
    raw = json.dumps(data).encode() if not isinstance(data, bytes) else data
    text = (base64.urlsafe_b64encode if alphabet == "url" else base64.b64encode)(raw).decode()
    return text if padded else text.rstrip("=")


def refused(header: str) -> str:
    with pytest.raises(InvalidRequest) as caught:
        decode_payment_header(header)
    assert caught.value.status == 400
    assert caught.value.code == "INVALID_REQUEST"
    detail = caught.value.detail
    if header.strip():
        assert header.strip()[:40] not in detail
    assert MARKER not in detail
    return detail


def dumped(payload: PaymentPayload) -> dict[str, Any]:
    return payload.model_dump(mode="json", by_alias=True)


# ------------------------------------------------------------ base64 variants


def awkward_document() -> dict[str, Any]:
    """A document whose base64 has '+' and '/' and needs padding, so variants differ."""
    for length in range(64):
        candidate = document(accepted__extra__note=">?" * length + "~")
        text = b64(candidate)
        if "+" in text and "/" in text and text.endswith("="):
            return candidate
    raise AssertionError("no awkward document found")


@pytest.mark.parametrize("alphabet", ["standard", "url"])
@pytest.mark.parametrize("padded", [True, False])
def test_standard_and_url_safe_base64_padded_or_not(alphabet: str, padded: bool) -> None:
    awkward = awkward_document()
    header = b64(awkward, alphabet, padded)
    assert dumped(decode_payment_header(header)) == awkward


def test_surrounding_whitespace_is_ignored() -> None:
    assert dumped(decode_payment_header(" \t" + b64(DOCUMENT) + "\r\n ")) == DOCUMENT


def test_header_of_exactly_8_kib_is_accepted() -> None:
    filler = document(accepted__extra__note="")
    size = len(json.dumps(filler).encode())
    filler["accepted"]["extra"]["note"] = "n" * (6144 - size)  # 6144 bytes -> 8192 chars
    header = b64(filler)
    assert len(header) == MAX_HEADER_CHARS == 8192
    assert dumped(decode_payment_header(header)) == filler


def test_header_over_8_kib_is_refused() -> None:
    header = b64(document(accepted__extra__note="n" * 6200))
    assert len(header) > MAX_HEADER_CHARS
    assert "longer than 8192" in refused(header)


@pytest.mark.parametrize("header", ["", "   ", "!!!!", "abc", "a" * 5, "ab$d", "\u00e9" * 8])
def test_non_base64_or_empty_is_refused(header: str) -> None:
    refused(header)


@pytest.mark.parametrize("raw", [b"not json", b"{", b"\xff\xfe", b"[" * 5000 + b"]" * 5000])
def test_non_json_is_refused(raw: bytes) -> None:
    refused(b64(raw))


@pytest.mark.parametrize("data", [[], [DOCUMENT], "x", 2, None])
def test_non_object_is_refused(data: object) -> None:
    assert "must hold a JSON object" in refused(b64(data))


# ------------------------------------------------------------- x402 version


@pytest.mark.parametrize("version", [1, 3, "2", True, None, ...])
def test_only_x402_version_2_is_accepted(version: Any) -> None:
    assert "x402Version" in refused(b64(document(x402Version=version)))


# ------------------------------------------------------ fields and their types

REQUIRED = [
    "payload",
    "payload__signature",
    "payload__authorization",
    "payload__authorization__from",
    "payload__authorization__to",
    "payload__authorization__value",
    "payload__authorization__validAfter",
    "payload__authorization__validBefore",
    "payload__authorization__nonce",
    "accepted",
    "accepted__scheme",
    "accepted__network",
    "accepted__asset",
    "accepted__amount",
    "accepted__payTo",
    "accepted__maxTimeoutSeconds",
]


def field_name(path: str) -> str:
    return path.split("__")[-1]


@pytest.mark.parametrize("path", REQUIRED)
def test_every_required_field_missing_is_refused(path: str) -> None:
    assert field_name(path) in refused(b64(document(**{path: ...})))


@pytest.mark.parametrize("path", REQUIRED)
def test_every_required_field_of_a_wrong_type_is_refused(path: str) -> None:
    wrong: object = 12345 if path != "accepted__maxTimeoutSeconds" else "300"
    assert field_name(path) in refused(b64(document(**{path: wrong})))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("payload__signature", "ab" * 65),
        ("payload__signature", "0x" + "zz" * 65),
        ("payload__signature", "0x"),
        ("payload__signature", "0x" + "a" * 131),
        ("payload__signature", "0x" + "ab" * 2049),
        ("payload__authorization__from", "0x" + "11" * 19),
        ("payload__authorization__from", MARKER),
        ("payload__authorization__to", "0x" + "1g" * 20),
        ("payload__authorization__value", "-1"),
        ("payload__authorization__value", "0x10"),
        ("payload__authorization__value", "1.5"),
        ("payload__authorization__value", ""),
        ("payload__authorization__value", "1" * 79),
        ("payload__authorization__validAfter", 0),
        ("payload__authorization__validBefore", " 1"),
        ("payload__authorization__nonce", "0x" + "42" * 31),
        ("payload__authorization__nonce", "42" * 32),
        ("accepted__maxTimeoutSeconds", True),
        ("accepted__maxTimeoutSeconds", -1),
        ("accepted__maxTimeoutSeconds", 300.5),
        ("accepted__scheme", "s" * 257),
        ("accepted__amount", 100000),
        ("accepted__extra", [1]),
        ("payload", []),
        ("accepted", "exact"),
    ],
)
def test_malformed_field_values_are_refused(path: str, value: object) -> None:
    refused(b64(document(**{path: value})))


@pytest.mark.parametrize("key", ["planId", "challengeId", "requestId"])
@pytest.mark.parametrize("value", [1, True, ["hourly"], {"id": "x"}])
def test_extra_ids_of_a_wrong_type_are_refused(key: str, value: object) -> None:
    detail = refused(b64(document(**{f"accepted__extra__{key}": value})))
    assert f"accepted.extra.{key} must be a " in detail


@pytest.mark.parametrize(
    "value",
    ["\ud800", "a\x00b", "c" * 300, CHALLENGE_ID.upper(), "c-1", ""],
    ids=["lone-surrogate", "nul", "300-chars", "uppercase", "not-a-uuid", "empty"],
)
def test_challenge_id_that_no_store_could_hold_is_400(value: str) -> None:
    """A challengeId is one of our UUIDs; anything else is refused before any store lookup."""
    detail = refused(b64(document(accepted__extra__challengeId=value)))
    assert "accepted.extra.challengeId must be a challenge id" in detail


@pytest.mark.parametrize(
    "value",
    ["\ud800", "a\x00b", "r" * 300, REQUEST_ID.upper(), "r-1", ""],
    ids=["lone-surrogate", "nul", "300-chars", "uppercase", "not-a-uuid", "empty"],
)
def test_request_id_in_extra_that_we_never_offered_is_400(value: str) -> None:
    """accepted.extra.requestId echoes the UUID a 402 offered; anything else is refused."""
    detail = refused(b64(document(accepted__extra__requestId=value)))
    assert "accepted.extra.requestId must be a request id" in detail


def test_extra_may_be_absent_and_unknown_extra_keys_are_kept() -> None:
    payload = decode_payment_header(b64(document(accepted__extra=...)))
    assert payload.accepted.extra is None
    assert payload.extra_str("planId") is None
    payload = decode_payment_header(b64(document(accepted__extra__note={"a": [1]})))
    assert payload.extra_str("planId") == "hourly"
    assert payload.extra_str("note") is None  # not a string
    assert payload.accepted.extra is not None
    assert payload.accepted.extra["note"] == {"a": [1]}


def test_decoded_fields() -> None:
    payload = decode_payment_header(b64(DOCUMENT))
    auth = payload.payload.authorization
    assert auth.from_ == AUTHORIZATION["from"]
    assert (auth.value, auth.validBefore) == ("100000", "1700000120")
    assert payload.accepted.maxTimeoutSeconds == 300
    assert payload.extra_str("challengeId") == CHALLENGE_ID
    assert payload.extra_str("requestId") == REQUEST_ID


def test_security_error_detail_never_echoes_the_header() -> None:
    """A header full of attacker text must not be reflected into the problem document."""
    header = b64(document(payload__authorization__nonce=MARKER, accepted__scheme=MARKER * 30))
    detail = refused(header)
    assert MARKER not in detail
    assert header[:16] not in detail


# ------------------------------------------------------------ encode_header


Doc = Callable[[], dict[str, Any]]


@pytest.mark.parametrize(
    "make",
    [lambda: DOCUMENT, awkward_document, lambda: {"success": True, "transaction": "0xab"}],
)
def test_encode_header_is_standard_base64_of_compact_json(make: Doc) -> None:
    data = make()
    header = encode_header(data)
    raw = base64.b64decode(header, validate=True)
    assert json.loads(raw) == data
    assert raw == json.dumps(data, separators=(",", ":")).encode()
    assert "-" not in header
    assert "_" not in header


def test_encode_then_decode_round_trips() -> None:
    awkward = awkward_document()
    assert dumped(decode_payment_header(encode_header(awkward))) == awkward


# --------------------------------------------------------------- requirement


def test_requirement_shape() -> None:
    network = custom_config().network_info
    offered = requirement(
        network=network, amount=100000, pay_to=WALLET, max_timeout_seconds=300, plan_id="hourly"
    )
    assert offered == {
        "scheme": "exact",
        "network": "eip155:31337",
        "amount": "100000",
        "asset": network.asset,
        "payTo": WALLET,
        "maxTimeoutSeconds": 300,
        "extra": {"name": "USD Coin", "version": "2", "planId": "hourly"},
    }


def test_requirement_with_challenge_and_request_ids_and_a_stored_asset() -> None:
    network = custom_config().network_info
    offered = requirement(
        network=network,
        amount="7",
        pay_to=WALLET,
        max_timeout_seconds=60,
        plan_id="daily",
        challenge_id="c-9",
        request_id="r-9",
        asset="0x" + "aa" * 20,
    )
    assert offered["amount"] == "7"
    assert offered["asset"] == "0x" + "aa" * 20
    assert offered["extra"] == {
        "name": "USD Coin",
        "version": "2",
        "planId": "daily",
        "challengeId": "c-9",
        "requestId": "r-9",
    }
