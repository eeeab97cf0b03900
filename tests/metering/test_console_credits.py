"""Grants that sell calls, in the seller's console: their credits, revoking, and top-ups.

A gateway selling ``calls-3`` with the console on: the official x402 client
buys, calls, and tops up by paying ``CREDITS_EXHAUSTED``; the console's grant
shows what was credited (the purchase and the top-up), spent and left, and
lists the top-up as a purchase of its own, never as a grant. Revoking the
grant refuses its token (and spends nothing); a top-up is not a grant to
revoke, and a revoked grant cannot be topped up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.console import ADMIN_TOKEN, Console
from tests.support.credentials import bearer
from tests.support.metering import PLANS, metering_routes
from tests.support.problems import assert_problem
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import free_port


@pytest.fixture(scope="module")
def metered_console(start_seller: Callable[..., Seller], echo_upstream: AppProcess) -> Console:
    port = free_port()
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=metering_routes(echo_upstream.url),
        admin={"token": ADMIN_TOKEN, "port": port},
        revocation={"refresh_seconds": 0.5},
    )
    return Console(seller, f"http://127.0.0.1:{port}/admin")


async def test_credits_top_ups_and_revoking_in_the_console(
    metered_console: Console, buyer: LocalAccount
) -> None:
    url = metered_console.seller.server.url
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{url}/llm/a")  # buys calls-3 and spends 1
        token = paid.headers["x-x402-access-token"]
        grant = decode_header(paid.headers["x-x402-grant"])
        for _ in range(2):
            await http.get(f"{url}/llm/a", headers=bearer(token))
        topped = await http.get(f"{url}/llm/a", headers=bearer(token))  # pays the 402: +3, -1
    top_up = decode_header(topped.headers["x-x402-top-up"])

    grants = metered_console.ok("/grants", payer=buyer.address)["items"]
    assert [g["challengeId"] for g in grants] == [grant["challengeId"]]  # not the top-up
    usage = grants[0]["usage"]
    assert (usage["credited"], usage["spent"], usage["balance"]) == (6, 4, 2)
    assert (usage["calls"], usage["topUps"], usage["planCalls"]) == (4, 1, 3)
    purchases = metered_console.ok("/purchases", q=buyer.address)["items"]
    assert {p["challengeId"] for p in purchases} == {grant["challengeId"], top_up["challengeId"]}

    refused = metered_console.post(f"/grants/{top_up['challengeId']}/revoke")
    assert_problem(refused, 409, "STATE_CONFLICT")
    revoked = metered_console.post(f"/grants/{grant['challengeId']}/revoke", {"reason": "abuse"})
    assert revoked.status_code == 200 and revoked.json()["usage"]["balance"] == 2

    # Within refresh_seconds the gateway may still let a call through (spending a credit,
    # then answering CREDITS_EXHAUSTED once they are spent); then it refuses the token.
    deadline = time.monotonic() + 15
    while (answer := httpx.get(f"{url}/llm/a", headers=bearer(token))).status_code != 401:
        assert answer.status_code in (200, 402), answer.text
        assert time.monotonic() < deadline, "the revoked token still opens the gateway"
        await asyncio.sleep(0.1)
    assert_problem(answer, 401, "TOKEN_REVOKED")
    after = metered_console.ok("/grants", payer=buyer.address)["items"][0]
    assert after["status"] == "revoked"
    for _ in range(3):  # refused calls spend nothing
        assert_problem(httpx.get(f"{url}/llm/a", headers=bearer(token)), 401, "TOKEN_REVOKED")
    again = metered_console.ok("/grants", payer=buyer.address)["items"][0]
    assert again["usage"] == after["usage"]

    body = {"topUp": grant["requestId"]}
    assert_problem(httpx.post(metered_console.seller.access_url, json=body), 410, "GRANT_REVOKED")
