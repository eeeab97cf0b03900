"""Gateway mode end to end: the official x402 client buys through a proxied route.

The buyer never talks to ``/x402/access``: it calls the seller's API through
the gateway, gets the route's 402, pays, and the SAME request is retried with
``PAYMENT-SIGNATURE`` (that is what the official client does). The gateway
settles it through the access pipeline, forwards the request as the new buyer
and hands back the upstream's answer with ``PAYMENT-RESPONSE`` and the token
(``X-X402-Access-Token``), which later calls use without paying again.
"""

from __future__ import annotations

import json

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.credentials import bearer
from tests.support.gateway import received_headers
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

HOURLY = 100_000
DAILY = 1_500_000


async def test_buy_through_the_gateway_then_reuse_the_token(
    gateway: Seller, buyer: LocalAccount
) -> None:
    before = gateway.balance()
    http, recorder = paying_client(buyer)
    async with http:
        paid = await http.post(f"{gateway.server.url}/api/forecast?city=berlin", json={"days": 3})
    assert paid.status_code == 200, paid.text
    assert gateway.balance() - before == HOURLY

    # the official client: first the plain request, then the SAME request with the payment
    first, retry = recorder.requests
    assert "payment-signature" not in first.headers
    assert retry.url == first.url and retry.method == "POST"
    assert json.loads(retry.content) == {"days": 3}

    # the upstream got the buyer's request, as the buyer, without the payment
    echo = paid.json()
    assert echo["raw_path"] == "/api/forecast" and echo["query"] == "city=berlin"
    assert json.loads(echo["body"]) == {"days": 3}
    headers = received_headers(echo)
    assert headers["x-x402-plan"] == ["hourly"]
    assert headers["x-x402-payer"] == [buyer.address]
    assert "payment-signature" not in headers

    # the buyer got the settlement and the grant
    settled = decode_header(paid.headers["payment-response"])
    assert settled["success"] is True and settled["payer"] == buyer.address
    grant = decode_header(paid.headers["x-x402-grant"])
    assert grant["type"] == "AccessGrant" and grant["planId"] == "hourly"
    assert grant["txHash"] == settled["transaction"]
    assert paid.headers["x-x402-access-token"] == grant["accessToken"]
    assert headers["x-x402-request-id"] == [grant["requestId"]]
    assert paid.headers["cache-control"] == "no-store"

    # later calls carry the token: forwarded, nothing paid
    transfers = len(gateway.chain.transfer_logs(to=gateway.wallet))
    balance = gateway.balance()
    again = httpx.get(f"{gateway.server.url}/api/other", headers=bearer(grant["accessToken"]))
    assert again.status_code == 200
    assert received_headers(again.json())["x-x402-request-id"] == [grant["requestId"]]
    assert "x-x402-access-token" not in again.headers
    assert len(gateway.chain.transfer_logs(to=gateway.wallet)) == transfers
    assert gateway.balance() == balance

    # the grant is the same one /x402/access hands out for its requestId
    fetched = httpx.post(
        gateway.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
    )
    assert fetched.status_code == 200
    assert fetched.json() == grant


async def test_an_answer_carrying_a_new_token_is_kept_by_no_cache_not_even_a_cdn(
    gateway: Seller, buyer: LocalAccount
) -> None:
    """The upstream lets every cache keep its answer, CDNs by their own fields (RFC 9213).

    Regression: the gateway set ``Cache-Control: no-store`` on the paid retry's answer,
    which carries the buyer's new token, but passed on the upstream's
    ``CDN-Cache-Control``, ``Cloudflare-CDN-Cache-Control`` and ``Surrogate-Control``,
    which a CDN obeys over ``Cache-Control``: a CDN in front of the gateway could keep
    the token and hand it to the next caller of that URL. Later calls, which carry no
    token, keep the upstream's fields.
    """
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{gateway.server.url}/api/_cacheable")
    assert paid.status_code == 200, paid.text
    assert "x-x402-access-token" in paid.headers
    assert paid.headers.get_list("cache-control") == ["no-store"]
    for field in ("cdn-cache-control", "cloudflare-cdn-cache-control", "surrogate-control"):
        assert field not in paid.headers, paid.headers

    token = paid.headers["x-x402-access-token"]
    again = httpx.get(f"{gateway.server.url}/api/_cacheable", headers=bearer(token))
    assert again.status_code == 200
    assert again.headers["cache-control"] == "public, max-age=3600"
    assert again.headers["cdn-cache-control"] == "max-age=3600"


async def test_replayed_payment_is_not_charged_twice(gateway: Seller, buyer: LocalAccount) -> None:
    http, recorder = paying_client(buyer)
    async with http:
        paid = await http.get(f"{gateway.server.url}/api/once")
    assert paid.status_code == 200, paid.text
    balance = gateway.balance()
    header = recorder.payment_headers()[0]
    replay = httpx.get(f"{gateway.server.url}/api/once", headers={"PAYMENT-SIGNATURE": header})
    assert replay.status_code == 200
    assert replay.headers["x-x402-access-token"] == paid.headers["x-x402-access-token"]
    assert gateway.balance() == balance


async def test_daily_only_route_sells_the_daily_plan(gateway: Seller, buyer: LocalAccount) -> None:
    before = gateway.balance()
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{gateway.server.url}/api/premium/report")
    assert paid.status_code == 200, paid.text
    assert gateway.balance() - before == DAILY
    assert decode_header(paid.headers["x-x402-grant"])["planId"] == "daily"


async def test_payment_for_a_plan_the_route_refuses_settles_nothing(
    gateway: Seller, buyer: LocalAccount
) -> None:
    """Security: an hourly payment offered at the daily-only route is answered with its 402."""
    hourly = next(a for a in gateway.discovery()["accepts"] if a["extra"]["planId"] == "hourly")
    payment = signed_payment(buyer, gateway.chain.token, hourly)
    before = gateway.balance()
    response = httpx.get(
        f"{gateway.server.url}/api/premium/report",
        headers={"PAYMENT-SIGNATURE": encode_payment(payment)},
    )
    assert response.status_code == 402
    required = decode_header(response.headers["payment-required"])
    assert [a["extra"]["planId"] for a in required["accepts"]] == ["daily"]
    assert "hourly" in required["error"]
    assert gateway.balance() == before


async def test_paid_retry_with_upstream_down_still_hands_over_the_token(
    gateway: Seller, buyer: LocalAccount
) -> None:
    """Paid, then the upstream failed: 502, but the buyer keeps what it paid for."""
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{gateway.server.url}/down/thing")
    assert paid.status_code == 502
    assert paid.json()["code"] == "UPSTREAM_UNAVAILABLE"
    token = paid.headers["x-x402-access-token"]
    assert decode_header(paid.headers["payment-response"])["success"] is True
    later = httpx.get(f"{gateway.server.url}/api/after-outage", headers=bearer(token))
    assert later.status_code == 200


async def test_bad_payment_header_is_400(gateway: Seller) -> None:
    response = httpx.get(
        f"{gateway.server.url}/api/x", headers={"PAYMENT-SIGNATURE": "not base64 json"}
    )
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST"
