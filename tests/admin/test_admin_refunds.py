"""Refunds through the admin API (docs/refunds.md): see what a purchase paid, refund part of it.

Real parts: the official x402 buyer and facilitator on anvil. Bad input is
400 INVALID_REQUEST with no refund record and no transfer; a refund answers
201 with the refund REFUNDED and the purchase's paid/refunded/left; the
Transfer events from the refund wallet match the refund records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from tests.support.console import ADMIN_TOKEN, Console
from tests.support.problems import assert_problem
from tests.support.purchase import HOURLY, buy
from tests.support.seller import Seller
from x402srv.devchain import Devchain

REFUND_KEY_ENV = "X402SRV_TEST_REFUND_KEY"


def _post(console: Console, path: str, body: dict[str, Any]) -> httpx.Response:
    # A refund is sent before the answer: give the facilitator time (the helper waits 5 s).
    return httpx.post(
        f"{console.url}/api{path}",
        content=json.dumps(body).encode(),
        headers={**console.headers(), "Content-Type": "application/json"},
        timeout=60,
    )


async def test_a_partial_refund_through_the_admin_api(
    start_seller: Callable[..., Seller], devchain: Devchain
) -> None:
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    seller = start_seller(
        "facilitator",
        env={REFUND_KEY_ENV: "0x" + bytes(wallet.key).hex()},
        refunds={"private_key": {"env": REFUND_KEY_ENV}},
        admin={"token": ADMIN_TOKEN, "prefix": "/ops"},
        metrics={"enabled": True},
    )
    console = Console(seller, f"{seller.server.url}/ops")
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start_block = devchain.rpc.block_number() + 1
    grant = await buy(seller, buyer)
    path = f"/purchases/{grant['challengeId']}/refunds"
    shown = console.ok(path)
    assert (shown["paid"], shown["refunded"], shown["left"], shown["refunds"]) == (
        "100000",
        "0",
        "100000",
        [],
    )

    for bad in ({"reason": "x", "amount": 5}, {"reason": "x", "amount": "-1"}, {"amount": "1"}):
        assert_problem(_post(console, path, bad), 400, "INVALID_REQUEST")
    assert_problem(_post(console, path, {"reason": "x", "amount": "100001"}), 409, "STATE_CONFLICT")
    assert console.ok(path)["refunds"] == []

    made = _post(console, path, {"reason": "late delivery", "amount": "30000"})
    assert made.status_code == 201, made.text
    answer = made.json()
    assert answer["refund"]["state"] == "REFUNDED"
    assert answer["refund"]["asked_by"] == "operator:token"  # who: the bearer token
    assert (answer["paid"], answer["refunded"], answer["left"]) == ("100000", "30000", "70000")
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), 30_000)]
    assert transfers[0].tx_hash.lower() == answer["refund"]["tx_hash"]
    exposed = httpx.get(f"{seller.server.url}/metrics").text
    assert 'x402srv_refunds_total{outcome="refunded",reason="operator"} 1.0' in exposed


async def test_the_console_refunds_after_a_confirmation_step(
    start_seller: Callable[..., Seller], devchain: Devchain
) -> None:
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    seller = start_seller(
        "facilitator",
        env={REFUND_KEY_ENV: "0x" + bytes(wallet.key).hex()},
        refunds={"private_key": {"env": REFUND_KEY_ENV}},
        admin={"token": ADMIN_TOKEN, "prefix": "/ops"},
    )
    console = Console(seller, f"{seller.server.url}/ops")
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start_block = devchain.rpc.block_number() + 1
    grant = await buy(seller, buyer)
    purchase = f"{console.url}/purchases/{grant['challengeId']}"
    with httpx.Client(follow_redirects=False, timeout=60) as client:
        signed = client.post(f"{console.url}/login", data={"token": ADMIN_TOKEN, "next": ""})
        assert signed.status_code == 303, signed.text
        page = client.get(purchase).text
        assert 'id="refund"' in page and "Paid 100000 · refunded 0 · left 100000" in page
        csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        form = {"csrf": csrf, "amount": "25000", "reason": "wrong plan"}
        review = client.post(f"{purchase}/refund", data=form)
        assert review.status_code == 200, review.text
        assert 'id="this-refund" class="bad">25000' in review.text
        assert 'id="left">100000' in review.text
        # the confirmation page sends nothing
        assert devchain.transfer_logs(from_address=wallet.address, from_block=start_block) == []
        sent = client.post(f"{purchase}/refund", data={**form, "confirm": "yes"})
        assert sent.status_code == 303, sent.text
        after = client.get(purchase).text
    assert "Paid 100000 · refunded 25000 · left 75000" in after
    assert "REFUNDED" in after and "console:" in after
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), 25_000)]
