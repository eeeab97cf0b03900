"""Buying a plan over raw A2A JSON-RPC (both URLs, both settlement strategies, real anvil).

The messages are exactly the a2a-x402 extension's Standalone flow with x402 v2
objects; each answer is validated with ``a2a-sdk``'s v0.3 models. The payment is
signed by the official x402 client from the task's ``x402.payment.required``.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from x402.schemas import PaymentRequired

from tests.support.a2a_jsonrpc import (
    ERROR,
    PAYLOAD,
    RECEIPTS,
    REQUIRED,
    STATUS,
    a2a_url,
    catalog_task,
    data,
    get,
    grant_of,
    message,
    open_task,
    pay,
    payment_for,
    required_of,
    send,
    status_metadata,
    task_of,
    text,
)
from tests.support.purchase import HOURLY, check_grant, seller_api
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, official_client

DAILY = 1_500_000


def _transfers(seller: Seller) -> int:
    return len(seller.chain.transfer_logs(to=seller.wallet))


@pytest.fixture(params=["a2a-path", "card-url"])
def url(request: pytest.FixtureRequest, seller: Seller) -> str:
    """Both places that speak JSON-RPC: ``<a2a_path>`` and the card's url."""
    return a2a_url(seller) if request.param == "a2a-path" else seller.access_url


async def test_catalog_then_purchase(seller: Seller, buyer: LocalAccount, url: str) -> None:
    catalog = catalog_task(url)
    [_, plans] = catalog["status"]["message"]["parts"]
    assert [p["planId"] for p in plans["data"]["plans"]] == ["hourly", "daily"]
    assert [a["extra"]["planId"] for a in plans["data"]["accepts"]] == ["hourly", "daily"]
    offered = status_metadata(catalog)
    assert offered[STATUS] == "payment-required"
    assert offered[REQUIRED]["accepts"] == plans["data"]["accepts"]
    assert "metadata" not in catalog  # no purchase yet

    task = open_task(url, "hourly")
    metadata = status_metadata(task)
    assert metadata[STATUS] == "payment-required"
    required = metadata[REQUIRED]
    assert set(required) == {"x402Version", "error", "resource", "accepts"}
    assert required["x402Version"] == 2
    [accepted] = required["accepts"]
    assert accepted["amount"] == str(HOURLY)
    assert accepted["payTo"] == seller.wallet
    assert accepted["extra"]["challengeId"] == task["metadata"]["x402srv.challengeId"]
    assert accepted["extra"]["requestId"] == task["metadata"]["x402srv.requestId"]
    assert (
        task["status"]["message"]["parts"][1]["data"]["challengeId"]
        == (accepted["extra"]["challengeId"])
    )

    client = official_client(buyer)
    payload = await client.create_payment_payload(PaymentRequired.model_validate(required))
    before = seller.balance()
    paid = task_of(
        pay(url, task, payload.model_dump(mode="json", by_alias=True, exclude_none=True))
    )
    assert paid["id"] == task["id"]
    assert paid["contextId"] == task["contextId"]
    assert paid["status"]["state"] == "completed", paid
    metadata = status_metadata(paid)
    assert metadata[STATUS] == "payment-completed"
    grant = grant_of(paid)
    check_grant(grant, seller)
    assert metadata[RECEIPTS] == [
        {
            "success": True,
            "transaction": grant["txHash"],
            "network": seller.chain.network,
            "payer": buyer.address,
        }
    ]
    assert seller.balance() - before == HOURLY

    api = seller_api(seller)
    _, answer = await api.asgi_client.get(
        "/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert answer.status == 200
    assert answer.json["plan"] == "hourly"

    # any URL answers tasks/get; the grant is also the HTTP route's for its requestId
    for where in (a2a_url(seller), seller.access_url):
        assert task_of(get(where, task["id"])) == paid
    again = httpx.post(
        seller.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
    )
    assert again.json() == grant


async def test_text_naming_a_plan_buys_it(seller: Seller, buyer: LocalAccount) -> None:
    url = a2a_url(seller)
    task = task_of(send(url, message(text("Buy the daily plan, please"))))
    assert task["status"]["state"] == "input-required"
    assert required_of(task)["accepts"][0]["amount"] == str(DAILY)
    before = seller.balance()
    paid = task_of(pay(url, task, payment_for(seller, buyer, task)))
    assert paid["status"]["state"] == "completed"
    assert grant_of(paid)["planId"] == "daily"
    assert seller.balance() - before == DAILY


async def test_the_same_payment_again_returns_the_completed_task(
    seller: Seller, buyer: LocalAccount, request_id: str
) -> None:
    """Idempotent like HTTP: the same (or any) payment on a completed task, no second transfer."""
    url = a2a_url(seller)
    task = open_task(url, "hourly", requestId=request_id, resourceId="reports/2026")
    assert task["metadata"]["x402srv.requestId"] == request_id
    payment = payment_for(seller, buyer, task)
    paid = task_of(pay(url, task, payment))
    assert paid["status"]["state"] == "completed"
    assert grant_of(paid)["resourceId"] == "reports/2026"
    transfers, balance = _transfers(seller), seller.balance()

    assert task_of(pay(url, task, payment)) == paid
    assert task_of(pay(url, task, payment_for(seller, buyer, task))) == paid
    assert _transfers(seller) == transfers
    assert seller.balance() == balance

    # a new task for the same requestId is the same purchase: completed at once
    reopened = task_of(
        send(
            url,
            message(
                data({"planId": "hourly", "requestId": request_id, "resourceId": "reports/2026"})
            ),
        )
    )
    assert reopened["id"] != task["id"]
    assert reopened["status"]["state"] == "completed"
    assert grant_of(reopened) == grant_of(paid)


def test_a_pending_challenge_is_offered_again_for_its_request_id(
    seller: Seller, request_id: str
) -> None:
    url = a2a_url(seller)
    first = open_task(url, "hourly", requestId=request_id)
    second = open_task(url, "hourly", requestId=request_id)
    assert first["id"] != second["id"]
    assert required_of(first) == required_of(second)  # same challenge, same requirements
    over_http = httpx.post(seller.access_url, json={"planId": "hourly", "requestId": request_id})
    assert over_http.json()["challengeId"] == first["metadata"]["x402srv.challengeId"]


async def test_a_refused_settlement_can_be_paid_again_on_the_same_task(
    seller: Seller, buyer: LocalAccount
) -> None:
    """An unfunded payer: INSUFFICIENT_FUNDS, the task input-required; then a funded one pays."""
    url = a2a_url(seller)
    task = open_task(url)
    broke = seller.chain.new_account(eth=1, usdc_atomic=0)
    transfers = _transfers(seller)
    failed = task_of(pay(url, task, payment_for(seller, broke, task)))
    assert _transfers(seller) == transfers
    assert failed["status"]["state"] == "input-required"
    metadata = status_metadata(failed)
    assert metadata[STATUS] == "payment-failed"
    assert metadata[ERROR] == "INSUFFICIENT_FUNDS"
    assert metadata[REQUIRED] == required_of(task)  # pay again, same terms
    assert metadata[RECEIPTS] == [
        {
            "success": False,
            "errorReason": "invalid_exact_evm_insufficient_balance",
            "transaction": "",
            "network": seller.chain.network,
        }
    ]

    paid = task_of(pay(url, task, payment_for(seller, buyer, task)))
    assert paid["status"]["state"] == "completed"
    receipts = status_metadata(paid)[RECEIPTS]
    assert [r["success"] for r in receipts] == [False, True]  # every receipt so far
    assert PAYLOAD not in status_metadata(paid)


def test_base_path_and_a2a_path_are_honoured(start_seller: Callable[..., Seller]) -> None:
    seller = start_seller("gas-wallet", server={"base_path": "/shop", "a2a_path": "/agent"})
    card = httpx.get(f"{seller.server.url}/.well-known/agent.json").json()  # the 0.3 card
    paths = [urlsplit(i["url"]).path for i in card["additionalInterfaces"]]
    assert paths == ["/shop/x402/access", "/shop/agent"]
    url = a2a_url(seller)
    assert url.endswith("/shop/agent")
    task = open_task(url)
    assert task_of(get(seller.access_url, task["id"])) == task
    too_big = httpx.post(url, content=b"[" + b" " * 70_000 + b"]")
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == -32600
    assert httpx.post(f"{seller.server.url}/a2a", json={}).status_code == 404


def test_a_task_paid_over_http_shows_completed(seller: Seller, buyer: LocalAccount) -> None:
    """One purchase, two transports: the task follows its challenge, paid either way."""
    url = a2a_url(seller)
    task = open_task(url)
    header = encode_payment(payment_for(seller, buyer, task))
    body = {"planId": "hourly", "requestId": task["metadata"]["x402srv.requestId"]}
    paid = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header})
    assert paid.status_code == 200, paid.text
    polled = task_of(get(url, task["id"]))
    assert polled["status"]["state"] == "completed"
    assert grant_of(polled) == paid.json()
