"""The 409 rows of the error table: reused requestIds and reused payments."""

from __future__ import annotations

import copy

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.problems import assert_problem, nothing_changes
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, paying_client


def test_request_id_reused_for_another_plan(seller: Seller, request_id: str) -> None:
    seller.challenge("hourly", requestId=request_id)
    with nothing_changes(seller):
        other_plan = httpx.post(
            seller.access_url, json={"planId": "daily", "requestId": request_id}
        )
        assert_problem(other_plan, 409, "REQUEST_ID_CONFLICT")
        other_resource = httpx.post(
            seller.access_url,
            json={"planId": "hourly", "requestId": request_id, "resourceId": "city:berlin"},
        )
        assert_problem(other_resource, 409, "REQUEST_ID_CONFLICT")


async def test_one_authorization_cannot_pay_two_challenges(
    seller: Seller, buyer: LocalAccount
) -> None:
    payment = seller.pay_with(buyer, "hourly")
    paid = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": payment.header},
    )
    assert paid.status_code == 200, paid.text

    # The same signed authorization, pointed at a second challenge (extra is not signed).
    second = seller.challenge("hourly")
    replay = copy.deepcopy(payment.document)
    replay["accepted"]["extra"]["challengeId"] = second["challengeId"]
    replay["accepted"]["extra"]["requestId"] = second["requestId"]
    with nothing_changes(seller):
        response = httpx.post(
            seller.access_url,
            json={"planId": "hourly"},
            headers={"PAYMENT-SIGNATURE": encode_payment(replay)},
        )
        assert_problem(response, 409, "TX_ALREADY_REDEEMED")


async def test_challenge_payment_replayed_without_its_challenge_id(
    seller: Seller, buyer: LocalAccount
) -> None:
    """The chain makes (from, nonce, signature) public: they alone must not fetch a grant."""
    payment = seller.pay_with(buyer, "hourly")
    paid = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": payment.header},
    )
    assert paid.status_code == 200
    anonymous = copy.deepcopy(payment.document)
    del anonymous["accepted"]["extra"]["challengeId"]
    del anonymous["accepted"]["extra"]["requestId"]
    with nothing_changes(seller):
        response = httpx.post(
            seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(anonymous)}
        )
        problem = assert_problem(response, 409, "TX_ALREADY_REDEEMED")
        assert "accessToken" not in response.text
        assert problem["detail"]


async def test_official_client_second_purchase_is_a_new_purchase(
    seller: Seller, buyer: LocalAccount
) -> None:
    """Calling again without the header is a new purchase: the client signs a new nonce."""
    http, recorder = paying_client(buyer)
    async with http:
        one = await http.post(seller.access_url, json={"planId": "hourly"})
        two = await http.post(seller.access_url, json={"planId": "hourly"})
    assert one.status_code == two.status_code == 200
    assert one.json()["txHash"] != two.json()["txHash"]
    assert len(set(recorder.payment_headers())) == 2
