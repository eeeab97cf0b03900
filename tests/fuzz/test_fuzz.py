"""Hostile input, generated: never a 500, never a chain call, never a stored change.

The decoders are fuzzed directly (they may only return a value or raise
``InvalidRequest``); the endpoint is fuzzed over HTTP against a real server,
with the seller's sqlite file and the chain's block number compared before and
after the whole run.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.problems import snapshot
from tests.support.seller import Seller
from x402srv.errors import InvalidRequest
from x402srv.testing.buyers import encode_payment
from x402srv.wire.protocol import decode_payment_header, parse_access_body

PLANS = {"hourly", "daily"}
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=30,
)
huge = st.sampled_from(
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"a":' * 3000 + b"1" + b"}" * 3000,
        b"9" * 10_000,
        b'{"planId": "' + b"x" * 60_000 + b'"}',
        json.dumps({"planId": "hourly", "resourceId": "r" * 300}).encode(),
        json.dumps({"requestId": "1" * 64}).encode(),
    ]
)


@FUZZ
@given(st.text(max_size=400) | st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode()))
def test_header_decoder_only_refuses_with_invalid_request(value: str) -> None:
    with contextlib.suppress(InvalidRequest):
        decode_payment_header(value)


@FUZZ
@given(json_values)
def test_header_decoder_on_any_json(document: Any) -> None:
    header = base64.b64encode(json.dumps(document).encode()).decode()
    with contextlib.suppress(InvalidRequest):
        decode_payment_header(header)


@FUZZ
@given(
    st.binary(max_size=2000) | json_values.map(lambda v: json.dumps(v).encode()) | huge,
    st.sampled_from([None, "application/json", "text/plain", "application/x+json", ""]),
)
def test_body_parser_only_refuses_with_invalid_request(
    raw: bytes, content_type: str | None
) -> None:
    with contextlib.suppress(InvalidRequest):  # UnsupportedMediaType is one too
        parse_access_body(raw, content_type)


@pytest.fixture
def untouched(seller: Seller) -> Iterator[None]:
    before, block = snapshot(seller), seller.chain.rpc.block_number()
    yield
    assert seller.chain.rpc.block_number() == block, "a transaction was sent"
    assert snapshot(seller) == before, "the store changed"


def _no_plan(value: Any) -> bool:
    return not (isinstance(value, dict) and value.get("planId") in PLANS)


def _answered_cleanly(response: httpx.Response) -> None:
    assert response.status_code != 500, response.text
    assert response.status_code in (400, 402, 409, 410, 415), response.text
    if response.status_code != 402 or "code" in response.text:
        assert response.headers["content-type"].startswith("application/problem+json")


@FUZZ
@given(
    body=st.binary(max_size=3000)
    | json_values.filter(_no_plan).map(lambda v: json.dumps(v).encode())
    | huge,
    content_type=st.sampled_from(["application/json", "text/plain", "application/octet-stream"]),
    header=st.none()
    # (stripped: HTTP cannot carry a value with outer spaces; httpx refuses to send one)
    | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300).map(str.strip)
    | json_values.map(lambda v: base64.b64encode(json.dumps(v).encode()).decode()),
)
def test_endpoint_random_input(
    seller: Seller, untouched: None, body: bytes, content_type: str, header: str | None
) -> None:
    headers = {"content-type": content_type}
    if header is not None:
        headers["PAYMENT-SIGNATURE"] = header
    response = httpx.post(seller.access_url, content=body, headers=headers)
    _answered_cleanly(response)
    assert response.status_code != 200


SIGNED_OR_COMPARED = [
    ("x402Version",),
    ("payload", "signature"),
    ("payload", "authorization", "from"),
    ("payload", "authorization", "to"),
    ("payload", "authorization", "value"),
    ("payload", "authorization", "validAfter"),
    ("payload", "authorization", "validBefore"),
    ("payload", "authorization", "nonce"),
    ("accepted", "scheme"),
    ("accepted", "network"),
    ("accepted", "asset"),
    ("accepted", "amount"),
    ("accepted", "payTo"),
    ("accepted", "maxTimeoutSeconds"),
]


@pytest.fixture(scope="module")
def valid_payment(seller: Seller, devchain: Any) -> tuple[dict[str, Any], LocalAccount]:
    buyer = devchain.new_account()
    return seller.pay_with(buyer, "hourly").document, buyer


def _differs(original: Any, value: Any) -> bool:
    """False when ``value`` means the same as ``original`` (so the payment might stay valid)."""
    if isinstance(original, str) and isinstance(value, str):
        if original.lower() == value.lower():
            return False
        for base in (10, 16):
            with contextlib.suppress(ValueError):
                if int(original, base) == int(value, base):
                    return False
        return True
    if _number(original) and _number(value):  # JSON has one number type: 2.0 is 2
        return bool(original != value)
    return type(original) is not type(value) or original != value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@FUZZ
@given(path=st.sampled_from(SIGNED_OR_COMPARED), value=json_values, data=st.data())
def test_endpoint_mutated_valid_payment(
    seller: Seller,
    untouched: None,
    valid_payment: tuple[dict[str, Any], LocalAccount],
    path: tuple[str, ...],
    value: Any,
    data: st.DataObject,
) -> None:
    payload = copy.deepcopy(valid_payment[0])
    node = payload
    for part in path[:-1]:
        node = node[part]
    original = node[path[-1]]
    if not _differs(original, value):
        value = data.draw(st.text(min_size=1).filter(lambda v: _differs(original, v)))
    node[path[-1]] = value
    response = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": encode_payment(payload)},
    )
    _answered_cleanly(response)
    assert response.status_code != 200


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /x402/access HTTP/1.1\r\nHost: x\r\nPAYMENT-SIGNATURE: a\x00b\r\n"
        b"Content-Length: 2\r\n\r\n{}",
        b"POST /x402/access HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{}",
        b"POST /x402/access HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
        b"POST /x402/access HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GARBAGE\r\n\r\n",
    ],
    ids=["nul-in-header", "short-body", "negative-length", "bad-chunk", "not-http"],
)
def test_malformed_http_never_500(seller: Seller, untouched: None, raw: bytes) -> None:
    """What HTTP clients refuse to send, sent over a raw socket."""
    with socket.create_connection(("127.0.0.1", seller.server.port), timeout=5) as sock:
        sock.sendall(raw)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    if answer:  # closing the connection without an answer is fine too
        status = int(answer.split(b" ", 2)[1])
        assert 400 <= status < 500, answer[:200]
