"""What the seller sees of MCP sales (the console per tool, export-sales), and revoking a grant.

A real seller with ``[admin]`` on and an ``[[mcp]]`` path; the official x402.mcp
client buys one call and a plan, a plain mcp client spends the plan's credits.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import time
from collections.abc import Callable
from typing import Any

from mcp.shared.exceptions import McpError

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.console import ADMIN_TOKEN, Console, console_pages
from tests.support.mcp import CALLS_PLAN, HOURLY_PLAN, mcp_table, upstream_runs
from tests.support.paths import SAMPLES
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import official_client
from x402srv.testing.servers import free_port

SAMPLE = runpy.run_path(str(SAMPLES / "mcp_buyer.py"))


async def overview_tools(console: Console, expected_calls: int) -> list[dict[str, Any]]:
    """The overview's tool figures once the counters were flushed (deadline: 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        tools: list[dict[str, Any]] = console.ok("/overview")["tools"]
        if sum(t["calls"] for t in tools) >= expected_calls or time.monotonic() > deadline:
            return tools
        await asyncio.sleep(0.2)


async def test_the_console_and_export_sales_show_mcp_sales_per_tool(
    start_seller: Callable[..., Seller], mcp_upstream: AppProcess, devchain: Devchain
) -> None:
    port = free_port()
    seller = start_seller(
        "gas-wallet",
        plans=[CALLS_PLAN, HOURLY_PLAN],
        mcp=[mcp_table(mcp_upstream.url)],
        admin={"token": ADMIN_TOKEN, "port": port},
        analytics={"flush_seconds": 0.2},
        revocation={"refresh_seconds": 0.5},
    )
    console = Console(seller, f"http://127.0.0.1:{port}/admin")
    url = f"{seller.server.url}/mcp"
    buyer = devchain.new_account(eth=0)
    await SAMPLE["pay_and_call"](url, official_client(buyer), "report", {"city": "x"})
    _, grant = await SAMPLE["pay_and_call"](url, official_client(buyer), "forecast", {"city": "x"})
    token = grant["accessToken"]
    for _ in range(2):
        await SAMPLE["call_with_token"](url, token, "forecast", {"city": "y"})
    await SAMPLE["call_with_token"](url, token, "broken", {"city": "y"})  # refunded

    # 2 unpaid probes (report, forecast) + 2 paid + 2 token forecasts + 1 broken
    tools = {t["name"]: t for t in await overview_tools(console, 7)}
    assert tools["report"]["outcomes"] == {"ok": 1, "payment_required": 1}
    assert tools["report"]["credits"] == 1  # the one call its payment bought
    assert tools["forecast"]["outcomes"] == {"ok": 3, "payment_required": 1}
    assert tools["forecast"]["credits"] == 3
    assert tools["broken"] == {
        "name": "broken",
        "calls": 1,
        "outcomes": {"tool_error": 1},
        "credits": 0,
    }

    (page,) = console_pages(console, "/")
    assert '<section class="card" id="tools">' in page and ">forecast</td>" in page

    exported = x402srv(seller, "export-sales", "--from", "2020-01-01", "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted((r["planId"], r["amount"]) for r in rows) == [
        ("calls-50", "500000"),
        ("mcp.report", "10000"),
    ]

    # the seller revokes the grant: its token gets a clear MCP error, never a forwarded call
    revoked = console.post(f"/grants/{grant['challengeId']}/revoke", {"reason": "chargeback"})
    assert revoked.status_code == 200, revoked.text
    before = (await upstream_runs(mcp_upstream.url))["forecast"]
    deadline = time.monotonic() + 20
    while True:
        try:
            await SAMPLE["call_with_token"](url, token, "forecast", {"city": "z"})
        except BaseExceptionGroup as raised:  # anyio's task groups wrap the McpError
            error = raised
            while isinstance(error, BaseExceptionGroup):
                error = error.exceptions[0]
            assert isinstance(error, McpError)
            assert error.error.message.startswith("TOKEN_REVOKED"), error.error.message
            break
        assert time.monotonic() < deadline, "the revoked token still opens the tool"
        before += 1  # (a call made before this instance read the revocation)
    assert (await upstream_runs(mcp_upstream.url))["forecast"] == before
