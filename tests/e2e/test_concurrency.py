"""Many buyers at once, and one payment sent many times at once (docs/protocol/flow.md, 6-7)."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

HOURLY = 100_000


async def test_twenty_buyers_settle_at_once(seller: Seller, devchain: Devchain) -> None:
    buyers = [devchain.new_account() for _ in range(20)]
    before = seller.balance()
    transfers = len(seller.chain.transfer_logs(to=seller.wallet))

    async def buy(account: LocalAccount) -> httpx.Response:
        http, _ = paying_client(account)
        async with http:
            return await http.post(seller.access_url, json={"planId": "hourly"})

    responses = await asyncio.gather(*(buy(b) for b in buyers))
    assert [r.status_code for r in responses] == [200] * 20, [
        r.text for r in responses if r.status_code != 200
    ]
    grants = [r.json() for r in responses]
    assert len({g["txHash"] for g in grants}) == 20
    assert len({g["challengeId"] for g in grants}) == 20
    assert seller.balance() - before == 20 * HOURLY
    assert len(seller.chain.transfer_logs(to=seller.wallet)) - transfers == 20


async def _send_many(
    seller: Seller, body: dict[str, str], header: str, n: int
) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60) as http:
        return list(
            await asyncio.gather(
                *(
                    http.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header})
                    for _ in range(n)
                )
            )
        )


def _check_one_settlement(
    seller: Seller, responses: list[httpx.Response], transfers: int
) -> dict[str, str]:
    outcomes = Counter(
        (r.status_code, r.json().get("code")) if r.status_code != 200 else (200, None)
        for r in responses
    )
    assert set(outcomes) <= {(200, None), (409, "SETTLEMENT_IN_PROGRESS")}, outcomes
    assert outcomes[(200, None)] >= 1
    for response in responses:
        if response.status_code == 409:
            assert int(response.headers["retry-after"]) >= 1
    grants: list[dict[str, str]] = [r.json() for r in responses if r.status_code == 200]
    assert all(g == grants[0] for g in grants)
    assert len(seller.chain.transfer_logs(to=seller.wallet)) - transfers == 1
    return grants[0]


async def test_same_payment_ten_times_at_once(seller: Seller, buyer: LocalAccount) -> None:
    payment = seller.pay_with(buyer, "hourly")
    header = payment.header
    transfers = len(seller.chain.transfer_logs(to=seller.wallet))
    before = seller.balance()

    responses = await _send_many(seller, {"planId": "hourly"}, header, 10)
    grant = _check_one_settlement(seller, responses, transfers)
    assert seller.balance() - before == HOURLY

    retry = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert retry.status_code == 200
    assert retry.json() == grant
    assert grant["challengeId"] == payment.challenge_id


async def test_same_discovery_first_payment_ten_times_at_once(
    seller: Seller, buyer: LocalAccount
) -> None:
    """No challengeId, no requestId: the ten replays still converge on one challenge."""
    accepted = seller.discovery()["accepts"][0]
    header = encode_payment(signed_payment(buyer, seller.chain.token, accepted))
    transfers = len(seller.chain.transfer_logs(to=seller.wallet))

    responses = await _send_many(seller, {}, header, 10)
    grant = _check_one_settlement(seller, responses, transfers)

    retry = httpx.post(seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": header})
    assert retry.status_code == 200
    assert retry.json() == grant
