"""Bad input gets a clear problem, never a 500, never a chain call, never a state change.

Every case is a real HTTP request to a real server (both settlement strategies).
Around each one the test snapshots the seller's sqlite file and the chain's block
number (anvil mines a block for every transaction, so an unchanged block number
means nothing was sent by anyone).
"""

from __future__ import annotations

import base64
import copy
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.seller import Seller
from x402srv.devchain import TokenInfo
from x402srv.testing.buyers import encode_payment, signed_payment

N = 115792089237316195423570985008687907852837564279074904382605163141518161494337


#: Tables that change on a schedule or per request by design, not by what a request asks:
#: the reconciler's lease (its background pass may run during any test) and the
#: unpaid-request counters (a 402 answered to bad input still counts).
NOT_STATE = {"leases", "rate_counters"}


def snapshot(seller: Seller) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the seller's sqlite store that holds purchases."""
    path = seller.server.directory / "x402srv.db"
    with sqlite3.connect(path) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr)  # noqa: S608
            for t in tables
            if t not in NOT_STATE
        }


@contextmanager
def nothing_changes(seller: Seller) -> Iterator[None]:
    before, block = snapshot(seller), seller.chain.rpc.block_number()
    yield
    assert seller.chain.rpc.block_number() == block, "a transaction was sent"
    assert snapshot(seller) == before, "the store changed"


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = dict(response.json())
    assert problem["code"] == code
    assert problem["status"] == status
    assert problem["type"] == "about:blank"
    assert problem["title"]
    assert problem["detail"]
    return problem


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
    """SPEC 4.2 step 1: base64url or standard, padded or not."""
    challenge = seller.challenge("hourly")
    payload = signed_payment(buyer, seller.chain.token, challenge["accepts"][0])
    response = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": encode_payment(payload, urlsafe=True)},
    )
    assert response.status_code == 200, response.text
    assert response.json()["challengeId"] == challenge["challengeId"]


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
