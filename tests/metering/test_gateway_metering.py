"""Metered calls through the gateway, bought and made by the official x402 client.

Each call of a plan that sells calls spends the route's cost from the grant's
balance in the store and says what is left in the IETF ``RateLimit`` /
``RateLimit-Policy`` fields; spent credits answer the plan's 402 offer with the
problem code ``CREDITS_EXHAUSTED``, a full rate window 429 with ``Retry-After``,
and an upstream 5xx gives the credit back.
"""

from __future__ import annotations

import re
import time

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.credentials import bearer
from tests.support.metering import CALLS_3_AMOUNT, limits, payment_required, shown
from tests.support.seller import Seller
from x402srv.config.plans import CALLS_TOKEN_TTL_SECONDS
from x402srv.testing.buyers import paying_client

WEEK = CALLS_TOKEN_TTL_SECONDS


async def _buy(gateway: Seller, buyer: LocalAccount, path: str) -> tuple[httpx.Response, str]:
    """The official client calls ``path``, pays the 402 and gets the upstream's answer."""
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.get(f"{gateway.server.url}{path}")
    assert paid.status_code == 200, paid.text
    return paid, paid.headers["x-x402-access-token"]


def _credits_left(response: httpx.Response) -> int:
    return limits(response.headers["ratelimit"])["credits"]["r"]


async def test_each_call_spends_a_credit_until_the_plan_is_offered_again(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url
    before = metered_gateway.balance()
    paid, token = await _buy(metered_gateway, buyer, "/llm/complete?n=1")
    assert metered_gateway.balance() - before == CALLS_3_AMOUNT
    # the paying call is the first of the three it bought
    assert paid.headers["ratelimit-policy"] == f'"credits";q=3;w={WEEK}'
    first = limits(paid.headers["ratelimit"])["credits"]
    assert first["r"] == 2
    assert WEEK - 60 <= first["t"] <= WEEK
    answers = [httpx.get(f"{url}/llm/complete?n={n}", headers=bearer(token)) for n in (2, 3)]
    assert [a.status_code for a in answers] == [200, 200]
    assert [_credits_left(a) for a in answers] == [1, 0]
    assert all(a.json()["path"].startswith("/llm/complete") for a in answers)  # the upstream's

    spent = httpx.get(f"{url}/llm/complete?n=4", headers=bearer(token))
    assert spent.status_code == 402
    body = spent.json()
    assert (body["code"], body["status"], body["title"]) == (
        "CREDITS_EXHAUSTED",
        402,
        "Credits exhausted",
    )
    assert (body["planId"], body["balance"], body["cost"]) == ("calls-3", 0, 1)
    # the plan's offer again, for this very URL: a standard x402 client can pay it
    required = payment_required(spent)
    assert [a["extra"]["planId"] for a in required["accepts"]] == ["calls-3"]
    assert required["accepts"][0]["extra"]["calls"] == 3
    assert required["resource"]["url"].endswith("/llm/complete")
    assert body["accepts"] == required["accepts"]
    assert spent.headers["cache-control"] == "no-store"
    assert _credits_left(spent) == 0
    assert spent.headers["ratelimit-policy"] == f'"credits";q=3;w={WEEK}'
    assert metered_gateway.balance() - before == CALLS_3_AMOUNT  # nothing charged by itself


async def test_a_route_may_cost_more_and_never_overdraws(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url
    _, token = await _buy(metered_gateway, buyer, "/llm/one")  # 2 left
    one = httpx.get(f"{url}/llm/one", headers=bearer(token))
    assert _credits_left(one) == 1
    batch = httpx.get(f"{url}/llm/batch/run", headers=bearer(token))  # costs 2
    assert batch.status_code == 402
    assert (batch.json()["balance"], batch.json()["cost"]) == (1, 2)
    last = httpx.get(f"{url}/llm/one", headers=bearer(token))
    assert (last.status_code, _credits_left(last)) == (200, 0)


async def test_an_upstream_5xx_gives_the_credit_back(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url
    _, token = await _buy(metered_gateway, buyer, "/llm/one")  # 2 left
    failed = httpx.get(f"{url}/llm/_status?code=503", headers=bearer(token))
    assert failed.status_code == 503
    assert _credits_left(failed) == 2
    after = httpx.get(f"{url}/llm/one", headers=bearer(token))
    assert _credits_left(after) == 1
    kept = httpx.get(f"{url}/llm/fragile/_status?code=500", headers=bearer(token))
    assert (kept.status_code, _credits_left(kept)) == (500, 0)  # refund_on_5xx = false
    gone = httpx.get(f"{url}/llm/one", headers=bearer(token))
    assert gone.status_code == 402


async def test_a_call_the_upstream_never_saw_costs_nothing_even_where_failures_are_kept(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    """``refund_on_5xx = false`` keeps the credits of a call the upstream failed.

    A call to an upstream that cannot be reached (nothing listens there: 502) was
    charged the same way, though no byte of it went out: charged by use, its
    reservation; at a fixed cost, its cost. It costs nothing now, on either route.
    """
    url = metered_gateway.server.url
    _, token = await _buy(metered_gateway, buyer, "/llm/one")  # 2 left
    for path in ("/llm/gone/x", "/llm/gone-by-use/x"):
        gone = httpx.get(f"{url}{path}", headers=bearer(token))
        assert gone.status_code == 502, gone.text
        assert gone.json()["code"] == "UPSTREAM_UNAVAILABLE"
        assert _credits_left(gone) == 2, path
    after = httpx.get(f"{url}/llm/one", headers=bearer(token))
    assert _credits_left(after) == 1


async def test_a_full_rate_window_answers_429_with_retry_after(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    """``rated`` sells an hour at 2 calls per grant and day; its paying call is the first."""
    url = metered_gateway.server.url
    paid, token = await _buy(metered_gateway, buyer, "/chat/hello")
    assert paid.headers["ratelimit-policy"] == '"rate";q=2;w=86400'
    window = limits(paid.headers["ratelimit"])["rate"]
    if window["t"] < 60:  # the day ends during this test: start in the next window instead
        time.sleep(window["t"] + 1)
        assert (
            limits(httpx.get(f"{url}/chat/x", headers=bearer(token)).headers["ratelimit"])["rate"][
                "r"
            ]
            == 1
        )
    else:
        assert window["r"] == 1
    second = httpx.get(f"{url}/chat/again", headers=bearer(token))
    assert second.status_code == 200
    assert limits(second.headers["ratelimit"])["rate"]["r"] == 0
    third = httpx.get(f"{url}/chat/more", headers=bearer(token))
    assert third.status_code == 429
    problem = third.json()
    assert (problem["code"], problem["title"]) == ("RATE_LIMITED", "Too many calls")
    reset = limits(third.headers["ratelimit"])["rate"]
    assert reset["r"] == 0
    assert int(third.headers["retry-after"]) == max(1, reset["t"])
    assert 0 < reset["t"] <= 86400
    assert third.headers["ratelimit-policy"] == '"rate";q=2;w=86400'
    print("\nrate-limited buyer:", shown(second), "//", shown(third))


async def test_unmetered_plans_carry_no_ratelimit_fields(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    paid, token = await _buy(metered_gateway, buyer, "/free/x")
    again = httpx.get(f"{metered_gateway.server.url}/free/y", headers=bearer(token))
    for answer in (paid, again):
        assert answer.status_code == 200
        assert "ratelimit" not in answer.headers
        assert "ratelimit-policy" not in answer.headers


async def test_metrics_count_credits_spent_per_plan(
    metered_gateway: Seller, buyer: LocalAccount
) -> None:
    url = metered_gateway.server.url

    def counted(name: str, plan: str) -> float:
        text = httpx.get(f"{url}/metrics").text
        found = re.search(rf'^{name}\{{plan="{plan}"\}} ([0-9.e+]+)$', text, re.M)
        return float(found[1]) if found else 0.0

    spent, added = (
        counted("x402srv_credits_spent_total", "calls-3"),
        counted("x402srv_credits_added_total", "calls-3"),
    )
    _, token = await _buy(metered_gateway, buyer, "/llm/one")  # +3 added, 1 spent
    httpx.get(f"{url}/llm/batch/two", headers=bearer(token))  # 2 spent
    httpx.get(f"{url}/llm/one", headers=bearer(token))  # refused: nothing spent
    assert counted("x402srv_credits_spent_total", "calls-3") - spent == 3
    assert counted("x402srv_credits_added_total", "calls-3") - added == 3
    text = httpx.get(f"{url}/metrics").text
    assert re.search(
        r'^x402srv_metered_refusals_total\{plan="calls-3",reason="no-credits"\} [1-9]', text, re.M
    )
