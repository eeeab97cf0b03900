"""A buyer agent buys a plan with the official x402 client, both ways, on anvil.

Runs once per settlement strategy (gas wallet, and a real facilitator process).
The grant's token must open a seller route protected by ``x402srv.guard``, the
seller's balance must rise by exactly the plan price, and replays must hand
back the stored grant without a second transfer.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.purchase import HOURLY, check_grant, seller_api
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import paying_client


async def test_challenge_first_purchase(seller: Seller, buyer: LocalAccount) -> None:
    before = seller.balance()
    http, recorder = paying_client(buyer)
    async with http:
        response = await http.post(seller.access_url, json={"planId": "hourly"})
    assert response.status_code == 200, response.text
    grant = response.json()
    check_grant(grant, seller)
    assert seller.balance() - before == HOURLY
    # the first request got a challenge; the paid retry named it
    first, paid = recorder.requests
    assert "payment-signature" not in first.headers
    sent = decode_header(paid.headers["payment-signature"])
    assert sent["accepted"]["extra"]["challengeId"] == grant["challengeId"]
    settled = decode_header(response.headers["payment-response"])
    assert settled == {
        "success": True,
        "transaction": grant["txHash"],
        "network": seller.chain.network,
        "payer": buyer.address,
    }
    assert response.headers["cache-control"] == "no-store"

    # the token opens the seller's guarded route
    api = seller_api(seller)
    _, answer = await api.asgi_client.get(
        "/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert answer.status == 200
    assert answer.json == {"forecast": "sunny", "plan": "hourly", "sub": grant["requestId"]}
    _, refused = await api.asgi_client.get("/weather")
    assert refused.status == 401


async def test_discovery_first_purchase(seller: Seller, buyer: LocalAccount) -> None:
    """POST {} -> every plan offered; the client pays the first and replays with the header only."""
    before = seller.balance()
    http, recorder = paying_client(buyer)
    async with http:
        response = await http.post(seller.access_url, json={})
    assert response.status_code == 200, response.text
    grant = response.json()
    check_grant(grant, seller)
    assert seller.balance() - before == HOURLY
    _first, paid = recorder.requests
    assert json.loads(paid.content) == {}
    sent = decode_header(paid.headers["payment-signature"])
    assert "challengeId" not in sent["accepted"]["extra"]
    assert sent["accepted"]["extra"]["planId"] == "hourly"

    # the buyer can fetch the grant again with the requestId the grant names
    again = httpx.post(
        seller.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
    )
    assert again.status_code == 200
    assert again.json() == grant


async def test_delivered_replay_returns_same_grant_without_second_transfer(
    seller: Seller, buyer: LocalAccount, request_id: str
) -> None:
    http, recorder = paying_client(buyer)
    body = {"planId": "daily", "requestId": request_id}
    async with http:
        response = await http.post(seller.access_url, json=body)
    assert response.status_code == 200, response.text
    grant = response.json()
    transfers = len(seller.chain.transfer_logs(to=seller.wallet))
    balance = seller.balance()

    header = recorder.payment_headers()[0]
    for headers in ({"PAYMENT-SIGNATURE": header}, {}):
        replay = httpx.post(seller.access_url, json=body, headers=headers)
        assert replay.status_code == 200
        assert replay.json() == grant
        assert decode_header(replay.headers["payment-response"])["transaction"] == grant["txHash"]
    assert len(seller.chain.transfer_logs(to=seller.wallet)) == transfers
    assert seller.balance() == balance


def sign_in_nonce(document: dict[str, Any]) -> str:
    return str(document["extensions"]["sign-in-with-x"]["info"]["nonce"])


def without_sign_in(document: dict[str, Any]) -> dict[str, Any]:
    extensions = {k: v for k, v in document["extensions"].items() if k != "sign-in-with-x"}
    return {**document, "extensions": extensions}


async def test_pending_challenge_is_idempotent(seller: Seller, request_id: str) -> None:
    first = httpx.post(seller.access_url, json={"planId": "hourly", "requestId": request_id})
    second = httpx.post(seller.access_url, json={"planId": "hourly", "requestId": request_id})
    assert first.status_code == second.status_code == 402
    # The same challenge, word for word, but for the sign-in-with-x nonce: fresh in every
    # 402, as the extension asks (docs/sign-in-with-x.md).
    nonces = {sign_in_nonce(r.json()) for r in (first, second)}
    assert len(nonces) == 2
    assert without_sign_in(first.json()) == without_sign_in(second.json())
    assert without_sign_in(decode_header(first.headers["payment-required"])) == without_sign_in(
        decode_header(second.headers["payment-required"])
    )
    body = first.json()
    assert body["requestId"] == request_id
    assert body["accepts"][0]["extra"]["challengeId"] == body["challengeId"]
    assert decode_header(first.headers["payment-required"])["accepts"] == body["accepts"]


async def test_discovery_offers_every_plan(seller: Seller) -> None:
    response = httpx.post(seller.access_url, json={})
    assert response.status_code == 402
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    required = decode_header(response.headers["payment-required"])
    assert required["x402Version"] == 2
    assert [a["extra"]["planId"] for a in required["accepts"]] == ["hourly", "daily"]
    assert [a["amount"] for a in required["accepts"]] == ["100000", "1500000"]
    for accept in required["accepts"]:
        assert accept["scheme"] == "exact"
        assert accept["network"] == seller.chain.network
        assert accept["asset"] == seller.chain.token.address
        assert accept["payTo"] == seller.wallet
        assert accept["extra"]["name"] == "USD Coin"
        assert accept["extra"]["version"] == "2"
    assert body["walletAddress"] == seller.wallet
    assert body["chainId"] == seller.chain.chain_id
    assert {p["planId"]: p["unitAmount"] for p in body["plans"]} == {
        "hourly": "$0.10",
        "daily": "$1.50",
    }
    assert body["resource"]["url"].endswith("/x402/access")
