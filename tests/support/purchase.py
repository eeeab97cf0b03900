"""A purchase as a buyer makes it, and what its grant must hold.

``buy`` pays with the official x402 client; ``check_grant`` holds an AccessGrant
to the wire format and to the chain; ``seller_api`` is the seller's own API
behind ``x402srv.guard``, as in the README.
"""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount
from sanic import Request, Sanic
from sanic.response import HTTPResponse
from sanic.response import json as json_response

from tests.support.seller import Seller
from x402srv.config.models import parse_config
from x402srv.guard import access_claims, require_access
from x402srv.testing.buyers import paying_client
from x402srv.tokens.verify import TokenVerifier

HOURLY = 100_000  # the "hourly" plan of seller_config: $0.10 with 6 decimals


async def buy(seller: Seller, buyer: LocalAccount, plan_id: str = "hourly") -> dict[str, Any]:
    """A grant bought with the official x402 client; the seller's balance rose.

    The one purchase helper: ``POST`` to the access endpoint as a buyer agent
    does, paying the 402 it gets.
    """
    before = seller.balance()
    http, _ = paying_client(buyer)
    async with http:
        response = await http.post(seller.access_url, json={"planId": plan_id})
    assert response.status_code == 200, response.text
    assert seller.balance() > before
    return dict(response.json())


def check_grant(grant: dict[str, Any], seller: Seller, plan_id: str = "hourly") -> None:
    """An AccessGrant for ``plan_id`` whose transaction succeeded on the seller's chain."""
    assert grant["type"] == "AccessGrant"
    assert grant["planId"] == plan_id
    assert grant["resourceId"] == "default"
    assert grant["tokenType"] == "Bearer"
    assert grant["network"] == seller.chain.network
    assert grant["txHash"].startswith("0x") and len(grant["txHash"]) == 66
    assert grant["expiresAt"].endswith("Z")
    receipt = seller.chain.rpc.wait_for_receipt(grant["txHash"])
    assert receipt.status == 1


def seller_api(seller: Seller) -> Sanic[Any, Any]:
    """The seller's own API: one route behind the guard, as in the README."""
    app: Sanic[Any, Any] = Sanic("seller_api")
    verifier = TokenVerifier.from_config(parse_config(seller.config, env=seller.server.env))

    @app.get("/weather")
    @require_access(verifier)
    async def weather(request: Request) -> HTTPResponse:
        claims = access_claims(request)
        return json_response(
            {"forecast": "sunny", "plan": claims.plan_id, "sub": claims.request_id}
        )

    return app
