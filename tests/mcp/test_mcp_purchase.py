"""Selling MCP tools end to end: a real FastMCP upstream, anvil, the official x402.mcp client.

Every money fact is counted on the chain: one transfer per paid call, one for a
plan and then its tool calls with the token (docs/mcp.md).
"""

from __future__ import annotations

import json
import runpy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import TextContent

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.mcp import CALLS_AMOUNT, REPORT_AMOUNT, upstream_runs
from tests.support.paths import SAMPLES
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import official_client

SAMPLE = runpy.run_path(str(SAMPLES / "mcp_buyer.py"))
pay_and_call = SAMPLE["pay_and_call"]
call_with_token = SAMPLE["call_with_token"]


def paid_by(devchain: Devchain, seller: Seller, buyer: LocalAccount) -> list[int]:
    return [
        log.value
        for log in devchain.transfer_logs(to=seller.wallet)
        if log.from_address.lower() == buyer.address.lower()
    ]


def text_of(result: Any) -> str:
    first = result.content[0]
    return str(first.text if isinstance(first, TextContent) else first)


def mcp_error(group: BaseException) -> McpError:
    """The McpError inside anyio's exception groups."""
    while isinstance(group, BaseExceptionGroup):
        group = group.exceptions[0]
    assert isinstance(group, McpError), group
    return group


@asynccontextmanager
async def session_at(seller: Seller) -> AsyncIterator[ClientSession]:
    """A plain mcp client session with x402srv's /mcp (no credential)."""
    async with (
        streamable_http_client(url(seller)) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def url(seller: Seller) -> str:
    return f"{seller.server.url}/mcp"


async def test_tools_list_shows_each_price(mcp_seller: Seller) -> None:
    async with session_at(mcp_seller) as session:
        listed = {tool.name: (tool.meta or {}) for tool in (await session.list_tools()).tools}
        resources = await session.list_resources()
        cities = await session.read_resource(resources.resources[0].uri)
        prompts = await session.list_prompts()
        prompt = await session.get_prompt("ask", {"city": "lima"})
    prices = {name: meta["x402srv/price"] for name, meta in listed.items()}
    assert prices["ping"] == {"free": True, "summary": "free"}
    assert prices["forecast"]["summary"] == "1 credit of a plan"
    assert prices["forecast"]["plans"] == ["calls-50", "hourly"]
    assert prices["report"]["perCall"] == {"price": "$0.01", "planId": "mcp.report"}
    assert prices["broken"]["credits"] == 2
    assert prices["echo"]["summary"] == "1 credit of a plan"  # unlisted: the default
    assert prices["summarize"]["summary"] == "up to 20 credits of a plan, charged by use"
    assert prices["summarize"]["byUse"] == {"reserve": 20}
    # resources and prompts pass through untouched
    assert "berlin" in cities.contents[0].text  # type: ignore[union-attr]
    assert [p.name for p in prompts.prompts] == ["ask"]
    assert "lima" in prompt.messages[0].content.text  # type: ignore[union-attr]


async def test_a_free_tool_is_forwarded(mcp_seller: Seller) -> None:
    async with session_at(mcp_seller) as session:
        result = await session.call_tool("ping", {})
    assert not result.isError and text_of(result) == "pong"


async def test_an_unpaid_call_gets_the_payment_required_result(
    mcp_seller: Seller, mcp_upstream: AppProcess
) -> None:
    before = await upstream_runs(mcp_upstream.url)
    async with session_at(mcp_seller) as session:
        result = await session.call_tool("report", {"city": "berlin"})
    assert result.isError
    required = result.structuredContent
    assert required is not None
    assert json.loads(text_of(result)) == required  # the same PaymentRequired twice
    assert required["x402Version"] == 2
    assert required["resource"]["url"] == "mcp://tool/report"
    offered = [(a["extra"]["planId"], a["amount"]) for a in required["accepts"]]
    assert offered == [("mcp.report", "10000"), ("calls-50", "500000"), ("hourly", "100000")]
    request_ids = {a["extra"]["requestId"] for a in required["accepts"]}
    assert len(request_ids) == 1  # one fresh requestId, as in the HTTP 402
    # the same requirements as the HTTP 402 (built by the same code)
    discovery = {a["extra"]["planId"]: a for a in mcp_seller.discovery()["accepts"]}
    for accept in required["accepts"]:
        plain = {k: v for k, v in accept.items() if k != "extra"}
        assert plain == {
            k: v for k, v in discovery[accept["extra"]["planId"]].items() if k != "extra"
        }
    assert await upstream_runs(mcp_upstream.url) == before  # nothing ran


async def test_the_official_client_pays_per_call(
    mcp_seller: Seller, mcp_upstream: AppProcess, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    before = (await upstream_runs(mcp_upstream.url)).get("report", 0)
    result, grant = await pay_and_call(
        url(mcp_seller), official_client(buyer), "report", {"city": "paris"}
    )
    assert result.payment_made and not result.is_error
    assert "Report for paris" in result.content[0].text
    receipt = result.payment_response
    assert receipt.success and receipt.payer == buyer.address
    assert grant is None  # one call bought, no plan
    assert paid_by(devchain, mcp_seller, buyer) == [REPORT_AMOUNT]
    assert (await upstream_runs(mcp_upstream.url))["report"] == before + 1


async def test_the_official_client_buys_a_plan_then_the_token_calls(
    mcp_seller: Seller, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    result, grant = await pay_and_call(
        url(mcp_seller), official_client(buyer), "forecast", {"city": "berlin"}
    )
    assert result.payment_made and not result.is_error
    assert grant["type"] == "AccessGrant" and grant["planId"] == "calls-50"
    meta = result.raw_result.meta
    assert meta["x402srv/ratelimit"]["credits"] == 49
    left = []
    for city in ("lima", "oslo", "rome"):
        called = await call_with_token(
            url(mcp_seller), grant["accessToken"], "forecast", {"city": city}
        )
        assert not called.isError and text_of(called).startswith(city)
        left.append(called.meta["x402srv/ratelimit"]["credits"])
    assert left == [48, 47, 46]
    assert paid_by(devchain, mcp_seller, buyer) == [CALLS_AMOUNT]  # one transfer for all four


async def test_a_failing_tool_gives_its_credits_back(
    mcp_seller: Seller, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    _, grant = await pay_and_call(
        url(mcp_seller), official_client(buyer), "forecast", {"city": "x"}
    )
    token = grant["accessToken"]
    failed = await call_with_token(url(mcp_seller), token, "broken", {"city": "x"})
    assert failed.isError and "down" in text_of(failed)
    assert failed.meta["x402srv/ratelimit"]["credits"] == 49  # 2 back


async def test_progress_streams_back_as_the_tool_reports_it(
    mcp_seller: Seller, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    _, grant = await pay_and_call(
        url(mcp_seller), official_client(buyer), "forecast", {"city": "x"}
    )
    seen: list[float] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    headers = {"Authorization": f"Bearer {grant['accessToken']}"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url(mcp_seller), http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(
            "count",
            {"to": 4},
            read_timeout_seconds=timedelta(seconds=30),
            progress_callback=progress,
        )
    assert text_of(result) == "counted to 4"
    assert seen == [1, 2, 3, 4]


@pytest.mark.parametrize("which", ["expired", "foreign"])
async def test_a_bad_token_gets_a_clear_mcp_error(
    mcp_seller: Seller, mcp_upstream: AppProcess, which: str
) -> None:
    from tests.support.gateway import mint_token

    token = (
        await mint_token("calls-50", ttl=-100)
        if which == "expired"
        else await mint_token("calls-50", secret="another-secret-" + "z" * 32)
    )
    before = await upstream_runs(mcp_upstream.url)
    with pytest.raises(BaseExceptionGroup) as raised:  # anyio's task groups wrap it
        await call_with_token(url(mcp_seller), token, "forecast", {"city": "x"})
    refused = mcp_error(raised.value)
    expected = "TOKEN_EXPIRED" if which == "expired" else "INVALID_TOKEN"
    assert refused.error.message.startswith(expected)
    assert refused.error.data is not None and refused.error.data["code"] == expected
    assert await upstream_runs(mcp_upstream.url) == before


async def test_metrics_count_tool_calls_per_tool_and_outcome(mcp_seller: Seller) -> None:
    async with session_at(mcp_seller) as session:
        await session.call_tool("ping", {})
        await session.call_tool("report", {"city": "x"})
    text = httpx.get(f"{mcp_seller.server.url}/metrics").text
    assert 'x402srv_mcp_tool_calls_total{outcome="ok",tool="ping"}' in text
    assert 'x402srv_mcp_tool_calls_total{outcome="payment_required",tool="report"}' in text


async def test_a_tool_charged_by_use_costs_what_its_result_reports(
    mcp_seller: Seller, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    _, grant = await pay_and_call(
        url(mcp_seller), official_client(buyer), "forecast", {"city": "x"}
    )  # 49 left
    token = grant["accessToken"]
    summaries = [
        ({"text": "one two three"}, 3),
        ({"text": "no report here", "report": False}, 20),  # on_missing: the reservation
        ({"text": "w " * 30}, 20),  # 30 reported, capped at the reservation
    ]
    left = 49
    for arguments, charged in summaries:
        called = await call_with_token(url(mcp_seller), token, "summarize", arguments)
        assert not called.isError, text_of(called)
        left -= charged
        assert called.meta["x402srv/usage"] == {"reserved": 20, "charged": charged, "balance": left}
        assert called.meta["x402srv/ratelimit"]["credits"] == left
    refused = await call_with_token(url(mcp_seller), token, "summarize", {"text": "a"})
    assert refused.isError  # 6 left cannot hold a reservation of 20: pay again
    assert refused.structuredContent["code"] == "CREDITS_EXHAUSTED"
    shown = x402srv(mcp_seller, "challenges", "show", grant["challengeId"])
    assert shown.returncode == 0, shown.stderr
    calls = json.loads(shown.stdout)["credits"]["calls_charged_by_use"]
    assert [(c["route"], c["reserved"], c["charged"]) for c in calls] == [
        ("/mcp:summarize", 20, 20),
        ("/mcp:summarize", 20, 20),
        ("/mcp:summarize", 20, 3),
    ]
