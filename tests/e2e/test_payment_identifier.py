"""payment-identifier (docs/payment-identifier.md) with the official Python client's helper.

The buyer is the official ``x402Client`` whose before-payment hook calls the
SDK's own ``append_payment_identifier_to_extensions``, as the SDK's example
does; the seller is a real server on anvil. The same id with the same payment
answers the same grant; with another payment it is 409 and nothing moves; a
seller that requires an id refuses a payment without one (400) before
anything is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from x402.extensions.payment_identifier import (
    append_payment_identifier_to_extensions,
    declare_payment_identifier_extension,
    generate_payment_id,
)
from x402.http.clients.httpx import x402AsyncTransport

from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import RecordingTransport, official_client


def client_with_id(
    buyer: LocalAccount, payment_id: str | None
) -> tuple[httpx.AsyncClient, RecordingTransport]:
    """The official client; with an id, its hook adds it through the SDK's helper."""
    client = official_client(buyer)
    if payment_id is not None:

        async def add_id(context: Any) -> None:
            extensions = context.payment_required.extensions
            if extensions is not None:
                append_payment_identifier_to_extensions(extensions, payment_id)

        client.on_before_payment_creation(add_id)
    recorder = RecordingTransport()
    return httpx.AsyncClient(transport=x402AsyncTransport(client, recorder), timeout=30), recorder


@pytest.fixture(scope="module")
def strict_seller(start_seller: Callable[..., Seller]) -> Seller:
    return start_seller("gas-wallet", payment_identifier={"required": True})


def test_payment_identifier_every_402_declares_it_as_the_sdk_does(seller: Seller) -> None:
    expected = declare_payment_identifier_extension()
    for body in ({}, {"planId": "hourly"}):
        answer = httpx.post(seller.access_url, json=body)
        assert answer.status_code == 402
        assert (
            decode_header(answer.headers["payment-required"])["extensions"]["payment-identifier"]
            == expected
        )
        assert answer.json()["extensions"]["payment-identifier"] == expected


async def test_payment_identifier_same_id_same_payment_same_grant_other_payment_409(
    seller: Seller, buyer: LocalAccount
) -> None:
    payment_id = generate_payment_id()
    http, recorder = client_with_id(buyer, payment_id)
    async with http:
        first = await http.post(seller.access_url, json={"planId": "hourly"})
        assert first.status_code == 200, first.text
        [paid] = [r for r in recorder.requests if "payment-signature" in r.headers]
        payload = decode_header(paid.headers["payment-signature"])
        assert payload["extensions"]["payment-identifier"]["info"]["id"] == payment_id
        # The same payment again (a buyer whose answer was lost): the same grant.
        again = httpx.post(
            seller.access_url,
            json={"planId": "hourly"},
            headers={"PAYMENT-SIGNATURE": paid.headers["payment-signature"]},
        )
        assert again.status_code == 200, again.text
        assert again.json() == first.json()
        # A new purchase signed with the same id: another payment, refused before the chain.
        balance = seller.balance()
        second = await http.post(seller.access_url, json={"planId": "hourly"})
    assert second.status_code == 409, second.text
    assert second.json()["code"] == "PAYMENT_ID_CONFLICT"
    assert seller.balance() == balance


async def test_payment_identifier_a_seller_can_require_it(
    strict_seller: Seller, buyer: LocalAccount
) -> None:
    declared = httpx.post(strict_seller.access_url, json={"planId": "hourly"})
    info = decode_header(declared.headers["payment-required"])["extensions"]["payment-identifier"]
    assert info == declare_payment_identifier_extension(required=True)
    balance = strict_seller.balance()
    http, _ = client_with_id(buyer, None)
    async with http:
        refused = await http.post(strict_seller.access_url, json={"planId": "hourly"})
    assert refused.status_code == 400 and refused.json()["code"] == "INVALID_REQUEST"
    assert "payment id" in refused.json()["detail"]
    assert strict_seller.balance() == balance
    http, _ = client_with_id(buyer, generate_payment_id())
    async with http:
        paid = await http.post(strict_seller.access_url, json={"planId": "hourly"})
    assert paid.status_code == 200, paid.text


async def test_payment_identifier_a_malformed_id_is_400_and_stores_nothing(
    seller: Seller, buyer: LocalAccount
) -> None:
    """Bad input: refused at the edge, before the challenge, the claim or the chain."""
    client = official_client(buyer)

    async def bad_id(context: Any) -> None:  # what the SDK's helper would refuse to write
        context.payment_required.extensions["payment-identifier"]["info"]["id"] = "short id!"

    client.on_before_payment_creation(bad_id)
    balance = seller.balance()
    async with httpx.AsyncClient(transport=x402AsyncTransport(client), timeout=30) as http:
        refused = await http.post(seller.access_url, json={"planId": "hourly"})
    assert refused.status_code == 400, refused.text
    assert "payment-identifier" in refused.json()["detail"]
    assert seller.balance() == balance
