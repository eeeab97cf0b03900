"""Bad input gets a clear problem, never a 500, never a chain call, never a state change.

Every case is a real HTTP request to a real server (both settlement strategies).
Around each one ``nothing_changes`` snapshots the seller's sqlite file and the
chain's block number (anvil mines a block for every transaction, so an unchanged
block number means nothing was sent by anyone).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.attacks import ATTACKS, Attack, attack_payment
from tests.support.problems import assert_problem, nothing_changes
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, signed_payment


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


BODY_CASES: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "non-JSON body",
        {"content": b"{nope", "headers": {"content-type": "application/json"}},
        400,
        "INVALID_REQUEST",
    ),
    (
        "text body",
        {"content": b"planId=hourly", "headers": {"content-type": "text/plain"}},
        415,
        "INVALID_REQUEST",
    ),
    ("array body", {"json": ["hourly"]}, 400, "INVALID_REQUEST"),
    ("planId not a string", {"json": {"planId": 7}}, 400, "INVALID_REQUEST"),
    (
        "requestId not a UUID",
        {"json": {"planId": "hourly", "requestId": "r-1"}},
        400,
        "INVALID_REQUEST",
    ),
    ("bad resourceId", {"json": {"planId": "hourly", "resourceId": "a b"}}, 400, "INVALID_REQUEST"),
    (
        "body over 64 KiB",
        {"json": {"planId": "hourly", "pad": "x" * 70_000}},
        400,
        "INVALID_REQUEST",
    ),
    (
        "deeply nested body",
        {"content": b"[" * 30_000 + b"]" * 30_000, "headers": {"content-type": "application/json"}},
        400,
        "INVALID_REQUEST",
    ),
    ("unknown plan", {"json": {"planId": "yearly"}}, 400, "TIER_NOT_FOUND"),
    (
        "garbage header",
        {"json": {"planId": "hourly"}, "headers": {"PAYMENT-SIGNATURE": "%%%not base64%%%"}},
        400,
        "INVALID_REQUEST",
    ),
    (
        "header not JSON",
        {"json": {"planId": "hourly"}, "headers": {"PAYMENT-SIGNATURE": b64(b"hello")}},
        400,
        "INVALID_REQUEST",
    ),
    (
        "header JSON array",
        {"json": {"planId": "hourly"}, "headers": {"PAYMENT-SIGNATURE": b64(b"[1,2]")}},
        400,
        "INVALID_REQUEST",
    ),
    (
        "oversized header",
        {"json": {"planId": "hourly"}, "headers": {"PAYMENT-SIGNATURE": "A" * 9000}},
        400,
        "INVALID_REQUEST",
    ),
]


@pytest.mark.parametrize(
    ("case", "request_kwargs", "status", "code"), BODY_CASES, ids=[c[0] for c in BODY_CASES]
)
def test_malformed_requests(
    seller: Seller, case: str, request_kwargs: dict[str, Any], status: int, code: str
) -> None:
    with nothing_changes(seller):
        response = httpx.post(seller.access_url, **request_kwargs)
        assert_problem(response, status, code)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_payment_attacks(seller: Seller, buyer: LocalAccount, attack: Attack) -> None:
    challenge = seller.challenge("hourly")
    payload = attack_payment(buyer, seller.chain.token, attack, challenge["accepts"][0])
    header = attack.raw(payload) if attack.raw else encode_payment(payload)
    with nothing_changes(seller):
        response = httpx.post(
            seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
        )
        problem = assert_problem(response, attack.status, attack.code)
        if attack.reason:
            assert problem["reason"] == attack.reason


def test_payment_header_without_a_plan(seller: Seller, buyer: LocalAccount) -> None:
    accepted = copy.deepcopy(seller.discovery()["accepts"][0])
    del accepted["extra"]["planId"]
    payload = signed_payment(buyer, seller.chain.token, accepted)
    with nothing_changes(seller):
        response = httpx.post(
            seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(payload)}
        )
        assert_problem(response, 400, "TIER_NOT_FOUND")


def test_base64url_unpadded_header_is_accepted(seller: Seller, buyer: LocalAccount) -> None:
    """docs/protocol/wire.md: base64url or standard, padded or not."""
    payment = seller.pay_with(buyer, "hourly")
    response = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": encode_payment(payment.document, urlsafe=True)},
    )
    assert response.status_code == 200, response.text
    assert response.json()["challengeId"] == payment.challenge_id


def test_unknown_routes_and_methods_are_problems(seller: Seller) -> None:
    assert_problem(httpx.get(f"{seller.server.url}/nope"), 404, "NOT_FOUND")
    assert_problem(httpx.get(seller.access_url), 405, "METHOD_NOT_ALLOWED")
    json.loads(httpx.get(f"{seller.server.url}/.well-known/agent.json").text)


def test_advisory_unclosed_nesting_does_not_crash_the_server(seller: Seller) -> None:
    """64 KiB of '[' once overflowed the C stack (py_ecc lifts the recursion limit): a crash."""
    with nothing_changes(seller):
        for body in (b"[" * 65_000, b'{"a":' * 13_000):
            response = httpx.post(
                seller.access_url, content=body, headers={"content-type": "application/json"}
            )
            assert_problem(response, 400, "INVALID_REQUEST")
        header = base64.b64encode(b"[" * 6000).decode()
        response = httpx.post(seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": header})
        assert_problem(response, 400, "INVALID_REQUEST")
    assert seller.server.process is not None
    assert seller.server.process.poll() is None, "the server died"
