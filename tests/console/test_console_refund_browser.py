"""A refund in the seller's console, in a real headless Chromium (docs/refunds.md).

The seller opens a purchase, asks for a partial refund, reviews it on the
confirmation page (nothing is sent yet), sends it, and sees it REFUNDED in the
purchase's refunds with its history. Screenshots: ``.artifacts/console/
refund-confirm.png`` and ``purchase-refunded.png``. The buyer is the official x402
client and the refund goes through the official SDK facilitator on anvil.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.browser import Browser, browser_missing
from tests.support.console import ADMIN_TOKEN
from tests.support.purchase import HOURLY, buy
from tests.support.seller import Seller
from x402srv.devchain import Devchain

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

REFUND_KEY_ENV = "X402SRV_TEST_REFUND_KEY"


@pytest.fixture
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser(tmp_path_factory.mktemp("browser") / "driver.log") as driver:
        yield driver


async def test_a_refund_is_reviewed_then_sent_from_the_purchase_page(
    start_seller: Callable[..., Seller], devchain: Devchain, browser: Browser
) -> None:
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    seller = start_seller(
        "facilitator",
        env={REFUND_KEY_ENV: "0x" + bytes(wallet.key).hex()},
        refunds={"private_key": {"env": REFUND_KEY_ENV}},
        admin={"token": ADMIN_TOKEN},
    )
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start_block = devchain.rpc.block_number() + 1
    grant = await buy(seller, buyer)
    admin = f"{seller.server.url}/admin"

    browser.viewport(1280, 900)
    browser.goto(f"{admin}/purchases/{grant['challengeId']}")
    browser.fill("#token", ADMIN_TOKEN)
    browser.submit("form.signin button")
    browser.wait_for("#refund-money", "left 100000")
    browser.click("#refund summary")
    browser.fill("#refund-amount", "40000")
    browser.fill("#refund-reason", "the seller's mistake")
    browser.submit("#refund form button")
    browser.wait_for("#this-refund", "40000")
    assert devchain.transfer_logs(from_address=wallet.address, from_block=start_block) == []
    browser.screenshot("refund-confirm")

    browser.submit("#refund-confirm form button")
    browser.wait_for("#refunds", "REFUNDED")
    assert "refunded 40000 · left 60000" in browser.text("#refund-money")
    assert "SENDING" in browser.text("#refunds")  # the refund's own history
    browser.screenshot("purchase-refunded")
    assert browser.problems() == []
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), 40_000)]
