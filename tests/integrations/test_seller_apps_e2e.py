"""Each seller integration end to end: the official x402 client buys, the seller's app admits.

- a FastAPI app under uvicorn with ``AccessMiddleware`` (shared HS256 secret);
- the same app verifying with x402srv's JWKS (EdDSA, async fetch path);
- a framework-free WSGI app calling ``verify_access_token_sync`` (JWKS, sync path).

(The gateway's own end-to-end purchase is ``test_gateway_purchase.py``.)
"""

from __future__ import annotations

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.purchase import buy
from tests.support.seller import Seller


def assert_refused_like_the_guard(response: httpx.Response) -> None:
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert response.json()["code"] == "INVALID_TOKEN"


async def test_fastapi_app_admits_a_bought_token(
    gateway: Seller, fastapi_app: AppProcess, buyer: LocalAccount
) -> None:
    grant = await buy(gateway, buyer)
    ok = httpx.get(
        f"{fastapi_app.url}/api/weather",
        headers={"Authorization": f"Bearer {grant['accessToken']}"},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"forecast": "sunny", "plan": "hourly", "sub": grant["requestId"]}
    assert_refused_like_the_guard(httpx.get(f"{fastapi_app.url}/api/weather"))


async def test_fastapi_app_serves_the_same_agent_card(
    gateway: Seller, fastapi_app: AppProcess
) -> None:
    ours = httpx.get(f"{fastapi_app.url}/.well-known/agent-card.json")
    # The app serves the 0.3 card it was given; x402srv serves it at agent.json.
    theirs = httpx.get(f"{gateway.server.url}/.well-known/agent.json")
    assert ours.status_code == 200
    assert ours.json() == theirs.json()


async def test_fastapi_app_with_jwks_admits_an_eddsa_token(
    eddsa_seller: Seller, fastapi_jwks_app: AppProcess, buyer: LocalAccount
) -> None:
    grant = await buy(eddsa_seller, buyer, "daily")
    ok = httpx.get(
        f"{fastapi_jwks_app.url}/api/weather",
        headers={"Authorization": f"Bearer {grant['accessToken']}"},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["plan"] == "daily"


async def test_plain_wsgi_app_with_the_sync_function_admits_a_token(
    eddsa_seller: Seller, wsgi_app: AppProcess, buyer: LocalAccount
) -> None:
    grant = await buy(eddsa_seller, buyer)
    ok = httpx.get(
        f"{wsgi_app.url}/api/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert ok.status_code == 200, ok.text
    assert ok.json() == {"plan": "hourly", "payer": buyer.address}
    refused = httpx.get(f"{wsgi_app.url}/api/weather", headers={"Authorization": "Bearer x.y.z"})
    assert_refused_like_the_guard(refused)
