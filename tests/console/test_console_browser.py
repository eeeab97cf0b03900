"""The seller's console in a real headless Chromium (Debian's, driven by playwright-core).

One seller in gateway mode (in front of the echo upstream), its console on a
port of its own. The story the issue asks for, step by step: sign in; the
purchases page is open when the official x402 client buys through the
gateway, and the purchase appears without a reload; search it by txHash and
by payer; open it (its history); revoke its grant; the gateway refuses the
token. Then the grants and challenges pages (cancel a challenge), the
overview with its chart, the funnel and settler health, and a phone-sized
screen. Screenshots go to ``.artifacts/console/`` (a few are copied into
``docs/images/`` for the console's page).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.browser import ARTIFACTS, Browser, browser_missing
from tests.support.console import ADMIN_TOKEN, Console
from tests.support.gateway import gateway_routes
from tests.support.problems import assert_problem
from tests.support.seller import Seller
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import free_port

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

PHONE = (390, 844)
DESKTOP = (1280, 900)


@pytest.fixture(scope="module")
def shop(start_seller: Callable[..., Seller], echo_upstream: AppProcess) -> Console:
    port = free_port()
    seller = start_seller(
        "gas-wallet",
        routes=gateway_routes(echo_upstream.url),
        admin={"token": ADMIN_TOKEN, "port": port},
        revocation={"refresh_seconds": 0.5},
        analytics={"flush_seconds": 0.2},
    )
    return Console(seller, f"http://127.0.0.1:{port}/admin")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser(tmp_path_factory.mktemp("browser") / "driver.log") as driver:
        yield driver


async def gateway_purchase(shop: Console, buyer: LocalAccount) -> tuple[str, dict[str, str]]:
    """The official x402 client pays for a gateway route: (its token, its AccessGrant)."""
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{shop.seller.server.url}/api/forecast?city=lisbon")
    assert paid.status_code == 200, paid.text
    grant = json.loads(base64.b64decode(paid.headers["x-x402-grant"]))
    return paid.headers["x-x402-access-token"], grant


def sign_in(browser: Browser, shop: Console) -> None:
    answer = browser.goto(f"{shop.url}/purchases")
    assert "/admin/login" in answer["url"]  # no session: the login page, coming back after
    browser.fill("#token", ADMIN_TOKEN)
    browser.submit("form.signin button")
    browser.wait_for_url("/admin/purchases")
    browser.wait_for("h1", "Purchases")


async def test_buy_find_revoke_and_see_the_gateway_refuse(
    shop: Console, browser: Browser, buyer: LocalAccount
) -> None:
    browser.viewport(*DESKTOP)
    answer = browser.goto(f"{shop.url}/")
    assert "/admin/login" in answer["url"]
    browser.fill("#token", "not-the-admin-token-" + "x" * 12)
    browser.submit("form.signin button")
    browser.wait_for(".error", "not the admin credential")
    assert browser.problems() == [
        "console: Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    ]  # the wrong credential's 401
    sign_in(browser, shop)

    # The page is open; the official client buys; the purchase appears by itself.
    token, grant = await gateway_purchase(shop, buyer)
    row = f"#purchase-{grant['challengeId']}"
    browser.wait_for(row)
    assert "DELIVERED" in browser.text(row)
    assert grant["planId"] in browser.text(row)
    assert re.search(r"\d+\.\d\d USDC \(\$\d+\.\d\d\)", browser.text(row))  # money, not 1000000
    browser.screenshot("purchases")

    # Search it by txHash, then by payer.
    browser.fill("input[name=q]", grant["txHash"])
    browser.submit("form.search button")
    browser.wait_for(row)
    assert browser.count("#purchases tbody tr") == 1
    browser.fill("input[name=q]", buyer.address)
    browser.submit("form.search button")
    browser.wait_for(row)
    assert browser.count("#purchases tbody tr[data-challenge]") == 1
    browser.screenshot("purchases-search")

    # Its page: the history, step by step, and the explorer-less tx hash.
    browser.click(f"{row} a.open")
    browser.wait_for("#history")
    history = browser.text("#history")
    for step in ("PENDING", "SETTLING", "PAID", "DELIVERED"):
        assert step in history
    assert grant["accessToken"] not in browser.text("main")
    browser.screenshot("purchase")

    # The token opens the gateway now.
    forecast = f"{shop.seller.server.url}/api/forecast"
    bearer = {"Authorization": f"Bearer {token}"}
    assert httpx.get(forecast, headers=bearer).status_code == 200

    # Revoke it from its page.
    browser.click("#revoke summary")
    browser.fill("#reason", "chargeback")
    browser.submit("#revoke button.danger")
    browser.wait_for("#revoked-at")
    assert "REVOKED" in browser.text("#purchase-state")
    assert "revoked: by console: chargeback" in browser.text("#history")
    browser.screenshot("purchase-revoked")

    # The gateway refuses the token within [revocation] refresh_seconds (0.5 s here).
    deadline = time.monotonic() + 15
    while (refused := httpx.get(forecast, headers=bearer)).status_code == 200:
        assert time.monotonic() < deadline, "the gateway still accepts the revoked token"
        await asyncio.sleep(0.1)
    assert_problem(refused, 401, "TOKEN_REVOKED")
    again = {"planId": grant["planId"], "requestId": grant["requestId"]}
    replay = httpx.post(shop.seller.access_url, json=again)
    assert_problem(replay, 410, "GRANT_REVOKED")

    # The grants page says so too.
    browser.goto(f"{shop.url}/grants")
    browser.wait_for(f"#grant-{grant['challengeId']}", "revoked")
    browser.screenshot("grants")
    assert browser.problems() == []


async def test_challenges_by_state_and_cancel(shop: Console, browser: Browser) -> None:
    browser.viewport(*DESKTOP)
    offer = shop.seller.challenge("daily")
    browser.goto(f"{shop.url}/challenges?state=PENDING")
    if "/login" in browser.url():
        sign_in(browser, shop)
        browser.goto(f"{shop.url}/challenges?state=PENDING")
    row = f"#challenge-{offer['challengeId']}"
    browser.wait_for(row, "PENDING")
    browser.screenshot("challenges")
    browser.submit(f"{row} button.danger")
    browser.wait_for("h1", "Challenges")
    assert browser.count(row) == 0  # no longer PENDING
    browser.goto(f"{shop.url}/challenges?state=CANCELLED")
    browser.wait_for(row, "CANCELLED")
    assert "cancelled by console" in browser.text(row)
    replay = httpx.post(
        shop.seller.access_url, json={"planId": "daily", "requestId": offer["requestId"]}
    )
    assert_problem(replay, 410, "CHALLENGE_EXPIRED")
    assert browser.problems() == []


async def test_the_overview_and_a_phone_sized_screen(
    shop: Console, browser: Browser, buyer: LocalAccount
) -> None:
    await gateway_purchase(shop, buyer)
    for _ in range(5):
        shop.seller.discovery()  # unpaid probes: the funnel's first stage
    browser.viewport(*DESKTOP)
    browser.goto(f"{shop.url}/?range=24h")
    if "/login" in browser.url():
        sign_in(browser, shop)
        browser.goto(f"{shop.url}/?range=24h")
    browser.wait_for("h1", "Overview")
    assert browser.count(".chart svg rect") >= 1  # the purchases' revenue, by hour
    assert browser.text("#revenue-total").startswith("$")
    funnel = browser.text(".funnel")
    for stage in ("Unpaid requests", "Challenges", "Payments tried", "Settled", "Delivered"):
        assert stage in funnel
    assert "of the step before" in funnel  # the step-to-step share, said apart from the bars
    assert "ready" in browser.text("#settlers")
    browser.screenshot("overview")

    browser.viewport(*PHONE)
    for path, name in (("/?range=24h", "overview-phone"), ("/purchases", "purchases-phone")):
        browser.goto(f"{shop.url}{path}")
        browser.wait_for("main h1")
        browser.screenshot(name)
        assert browser.scroll_width() <= PHONE[0], f"{path} scrolls sideways on a phone"
    assert browser.problems() == []
    assert (ARTIFACTS / "overview.png").exists()
