"""What a seller reads in the console (issue 30, item 3), on a real seller's console pages.

Amounts are money: the token's units and USD, as the overview's dollars are
(the admin API keeps atomic units); the funnel's bars and the percentages
beside them are the same numbers; a buyer whose balance is too low is not a
fault of the seller's settler, so it is not shown in red under its health.
"""

from __future__ import annotations

import re
import time

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.console import Console, console_pages
from tests.support.purchase import buy
from x402srv.admin.chart import funnel_steps
from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, signed_payment


async def test_purchases_read_as_money_and_the_api_keeps_atomic_units(
    console: Console, buyer: LocalAccount
) -> None:
    grant = await buy(console.seller, buyer)
    listing, detail, overview = console_pages(
        console, "/purchases", f"/purchases/{grant['challengeId']}", "/?range=24h"
    )
    row = listing.split(f'id="purchase-{grant["challengeId"]}"', 1)[1].split("</tr>", 1)[0]
    assert '<td data-label="Amount" class="num" title="100000 atomic units">' in row
    assert "0.10 USDC ($0.10)</td>" in row
    amount = detail.split('<dd id="amount">', 1)[1].split("</dd>", 1)[0]
    assert amount.startswith("0.10 USDC ($0.10) ")
    assert "100000 atomic units" in amount
    totals = overview.split('<table class="compact list">', 1)[1].split("</table>", 1)[0]
    # (the overview's revenue is net of refunds, and its title says so)
    assert re.search(r'title="\d+ atomic units, net of refunds">[\d,]+\.\d\d USDC</td>', totals), (
        totals
    )
    assert re.search(r'data-label="USD" class="num">\$[\d,]+\.\d\d</td>', totals), totals
    api = console.ok(f"/purchases/{grant['challengeId']}")
    assert api["amount"] == "100000"  # the API, like exports, keeps what the chain moved


def test_the_funnels_bars_and_percentages_tell_the_same_story() -> None:
    """Issue 30: "Payments tried 5 · 50%" was drawn a third long."""
    counts = {"unpaid": 15, "challenges": 10, "tried": 5, "settled": 5, "delivered": 4}
    steps = funnel_steps({"stages": [{"stage": k, "count": n} for k, n in counts.items()]})
    tried = steps[2]
    assert (tried.name, tried.count) == ("Payments tried", 5)
    assert round(tried.percent_of_max) == 33
    assert tried.share == "33%"  # beside the bar, the bar's own number
    assert tried.conversion == "50%"  # said apart: "50% of the step before"
    assert [s.share for s in steps] == ["100%", "67%", "33%", "33%", "27%"]


async def test_a_buyer_without_funds_is_not_a_settler_fault(
    console: Console, devchain: Devchain
) -> None:
    seller = console.seller
    poor = devchain.new_account(usdc_atomic=0)
    offer = seller.challenge("hourly")
    header = encode_payment(signed_payment(poor, devchain.token, offer["accepts"][0]))
    refused = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert refused.status_code == 402, refused.text
    deadline = time.monotonic() + 15
    while True:  # the analytics flush every 0.2 s here
        [page] = console_pages(console, "/?range=24h")
        calls = page.split("<h3>Settlement calls</h3>", 1)[1].split("</table>", 1)[0]
        if "payments refused (buyer&#39;s side)" in calls:
            break
        assert time.monotonic() < deadline, calls
        time.sleep(0.2)
    assert re.search(r'<span class="muted" title="[^"]+">\d+ payments refused \(buyer', calls)
    assert not re.search(r'<span class="bad">\d+ (refused|rejected)</span>', calls), calls
