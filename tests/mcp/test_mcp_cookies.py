"""An MCP server's cookies for one buyer never go with another buyer's calls (docs/mcp.md).

Real processes: x402srv with an ``[[mcp]]`` table in front of the test FastMCP
server inside a layer that sets a cookie on each of its answers and records the
``Cookie`` header of each request it gets (``tests/support/mcp_cookie_upstream.py``).
The MCP gateway calls its upstreams through one httpx client for every buyer
(``x402srv.gateway.upstreams.upstream_client``), as the HTTP gateway does.
"""

from __future__ import annotations

import http.cookiejar
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.apps import AppProcess
from tests.support.credentials import bearer
from tests.support.gateway import mint_token
from tests.support.mcp import CALLS_PLAN, HOURLY_PLAN, answer_of, mcp_table, open_session, rpc
from tests.support.mcp_cookie_upstream import CACHE_FIELDS
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import signed_payment

OTHER_PAYER = "0x" + "cd" * 20


@pytest.fixture(scope="module")
def cookie_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    log = tmp_path_factory.mktemp("mcp-cookie-upstream") / "upstream.log"
    process = AppProcess("tests.support.mcp_cookie_upstream:app", log).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def cookie_seller(start_seller: Callable[..., Seller], cookie_upstream: AppProcess) -> Seller:
    return start_seller(
        "gas-wallet", plans=[CALLS_PLAN, HOURLY_PLAN], mcp=[mcp_table(cookie_upstream.url)]
    )


def _forecast(id: int) -> dict[str, Any]:
    return rpc("tools/call", {"name": "forecast", "arguments": {"city": "lima"}}, id=id)


async def _received(upstream: AppProcess) -> list[dict[str, Any]]:
    async with httpx.AsyncClient() as client:
        return list((await client.get(f"{upstream.url}/_control/cookies")).json())


async def test_an_mcp_servers_cookies_for_one_buyer_never_reach_it_with_another_buyers_call(
    cookie_seller: Seller, cookie_upstream: AppProcess
) -> None:
    """Security: the MCP gateway's one upstream client must not keep the cookies it passes back.

    httpx's client keeps every ``Set-Cookie`` it reads and sends it with its later
    requests to that host: the session an MCP server opened for one buyer would go
    with every other buyer's tool calls, on the upstream's word that it is the
    same caller. The cookies pass back to the buyer who got them, and a buyer's
    own ``Cookie`` header goes on as sent.
    """
    url = f"{cookie_seller.server.url}/mcp"
    first_token = bearer(await mint_token())
    async with httpx.AsyncClient(timeout=30) as first_buyer:  # (keeps what it is sent)
        session = await open_session(first_buyer, url, **first_token)
        first = await first_buyer.post(url, json=_forecast(2), headers=session)
    assert not answer_of(first)["result"]["isError"], first.text
    set_cookies = first.headers.get_list("set-cookie")  # the buyer's to keep
    assert len(set_cookies) == 1 and set_cookies[0].startswith("upstream-session="), set_cookies
    before_other = len(await _received(cookie_upstream))

    # The other buyer's client keeps no cookie: any its requests carry came from the gateway.
    keeps_none = http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    other_token = bearer(await mint_token(payer=OTHER_PAYER))
    async with httpx.AsyncClient(timeout=30, cookies=keeps_none) as other_buyer:
        session = await open_session(other_buyer, url, **other_token)
        other = await other_buyer.post(url, json=_forecast(2), headers=session)
        mine = {**session, "Cookie": "mine=1"}
        own = await other_buyer.post(url, json=_forecast(3), headers=mine)
    assert not answer_of(other)["result"]["isError"], other.text
    assert not answer_of(own)["result"]["isError"], own.text

    received = (await _received(cookie_upstream))[before_other:]
    methods = [seen["method"] for seen in received]
    assert methods == [
        "initialize",
        "notifications/initialized",
        "tools/call:forecast",
        "tools/call:forecast",
    ]
    assert [seen["cookie"] for seen in received[:3]] == [None, None, None]  # none of the first's
    assert received[3]["cookie"] == "mine=1"  # a buyer's own cookies pass


async def test_a_tool_call_that_buys_a_plan_is_kept_by_no_cache_not_even_a_cdn(
    cookie_seller: Seller, devchain: Devchain
) -> None:
    """The MCP server lets every cache keep its answers, CDNs by their own field.

    Regression: the answer of a ``tools/call`` paid for with a plan carries the grant
    (its bearer token) in the result's ``_meta``, yet passed on the upstream's
    ``Cache-Control`` and ``CDN-Cache-Control`` and said nothing itself: a cache in
    front of x402srv allowed to keep POST answers could hand the token to another
    caller. It is now ``no-store`` with the upstream's cache fields dropped, as the
    HTTP gateway's paid answers are; a call with the token keeps them.
    """
    url = f"{cookie_seller.server.url}/mcp"
    buyer = devchain.new_account(eth=0)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url)
        unpaid = answer_of(await http.post(url, json=_forecast(2), headers=session))
        accepts = unpaid["result"]["structuredContent"]["accepts"]
        payment = signed_payment(buyer, devchain.token, accepts[0])
        paying = _forecast(3)
        paying["params"]["_meta"] = {"x402/payment": payment}
        paid = await http.post(url, json=paying, headers=session)
        grant = answer_of(paid)["result"]["_meta"]["x402srv/grant"]
        assert grant["type"] == "AccessGrant"
        assert paid.headers.get_list("cache-control") == ["no-store"]
        assert "cdn-cache-control" not in paid.headers

        with_token = {**session, **bearer(grant["accessToken"])}
        later = await http.post(url, json=_forecast(4), headers=with_token)
    assert not answer_of(later)["result"]["isError"], later.text
    # (FastMCP's own "no-cache, no-transform" comes first, on one line with the layer's)
    assert CACHE_FIELDS["cache-control"] in later.headers["cache-control"]
    assert later.headers["cdn-cache-control"] == CACHE_FIELDS["cdn-cache-control"]
