"""Strings no store can hold are the client's mistake: 400, for every store and transport.

A lone surrogate (``"\\ud800"``, sent as the JSON escape) once reached a sqlite
lookup and came back as 500 INTERNAL_ERROR with a traceback per request. Every
id a request carries (body ``planId``/``requestId``/``resourceId``, and
``accepted.extra.planId``/``challengeId`` in the payment header) is checked at
the edge now. Each row runs against sqlite, memory and Redis, over
``/x402/access`` and through a gateway route; the server's log must hold no
traceback and nothing may be stored or sent on-chain.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.gateway import gateway_routes
from tests.support.seller import Seller
from x402srv.testing.buyers import signed_payment

UNSTORABLE = {"lone-surrogate": "\ud800", "nul": "a\x00b", "301-chars": "x" * 301}


def raw_json(document: dict[str, Any]) -> bytes:
    """JSON with ``\\uXXXX`` escapes: a lone surrogate cannot be sent any other way."""
    return json.dumps(document).encode("ascii")


@pytest.fixture(scope="module", params=["sqlite", "memory", "redis"])
def any_store_seller(
    request: pytest.FixtureRequest,
    start_seller: Callable[..., Seller],
    echo_upstream: AppProcess,
) -> Seller:
    backend = str(request.param)
    store: dict[str, Any] = {"backend": backend, "path": "x402srv.db"}
    if backend == "memory":
        store = {"backend": "memory"}
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        store = {"backend": "redis", "url": url, "redis": {"key_prefix": f"ids-{id(request)}:"}}
    return start_seller("gas-wallet", store=store, routes=gateway_routes(echo_upstream.url)[:1])


def header(document: dict[str, Any]) -> str:
    return base64.b64encode(raw_json(document)).decode()


def answers(seller: Seller, response: httpx.Response) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] in ("INVALID_REQUEST", "TIER_NOT_FOUND")


@pytest.mark.parametrize("value", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
@pytest.mark.parametrize("field", ["planId", "requestId", "resourceId"])
def test_unstorable_body_field_is_400(any_store_seller: Seller, field: str, value: str) -> None:
    seller = any_store_seller
    block = seller.chain.rpc.block_number()
    body = {"planId": "hourly", field: value}
    response = httpx.post(
        seller.access_url, content=raw_json(body), headers={"content-type": "application/json"}
    )
    answers(seller, response)
    assert seller.chain.rpc.block_number() == block
    assert "Traceback" not in seller.server.logs()


@pytest.mark.parametrize("value", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
@pytest.mark.parametrize("key", ["planId", "challengeId"])
@pytest.mark.parametrize("transport", ["access", "gateway"])
def test_unstorable_id_in_the_payment_header_is_400(
    any_store_seller: Seller, buyer: LocalAccount, key: str, value: str, transport: str
) -> None:
    seller = any_store_seller
    offer = seller.challenge("hourly")
    accepted = offer["accepts"][0]
    payment = signed_payment(buyer, seller.chain.token, accepted)
    payment["accepted"]["extra"][key] = value
    block = seller.chain.rpc.block_number()
    headers = {"PAYMENT-SIGNATURE": header(payment)}
    if transport == "access":
        response = httpx.post(seller.access_url, json={}, headers=headers)
    else:
        response = httpx.get(f"{seller.server.url}/api/forecast", headers=headers)
    answers(seller, response)
    assert seller.chain.rpc.block_number() == block
    assert seller.balance() == 0
    assert "Traceback" not in seller.server.logs()
