"""The MCP gateway's test seller: its plans, its ``[[mcp]]`` table, raw JSON-RPC to it.

``tests/mcp/conftest.py`` runs ``tests/support/mcp_upstream.py`` (FastMCP) as its own
process and x402srv in front of it with these tables.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

CALLS_PLAN = {
    "plan_id": "calls-50",
    "unit_amount": "$0.50",
    "description": "50 tool calls",
    "calls": 50,
}
HOURLY_PLAN = {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of tools"}
CALLS_AMOUNT = 500_000
REPORT_AMOUNT = 10_000  # report's per-call price, $0.01

#: What MCP's Streamable HTTP transport asks a client to send with every POST.
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def mcp_table(upstream_url: str, **overrides: Any) -> dict[str, Any]:
    """The test seller's ``[[mcp]]`` table: one tool of each kind."""
    return {
        "path": "/mcp",
        "upstream": f"{upstream_url}/mcp",
        "plans": ["calls-50", "hourly"],
        "tools": {
            "ping": {"free": True},
            "forecast": {"cost": 1},
            "report": {"price": "$0.01"},
            "broken": {"cost": 2},
            "count": {"cost": 1},
            "summarize": {"cost": {"reserve": 20, "from": "meta"}},  # charged by use
        },
        **overrides,
    }


def rpc(method: str, params: dict[str, Any] | None = None, id: int | str = 1) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON body or in the last ``data:`` line of an SSE body."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


async def open_session(http: httpx.AsyncClient, url: str, **headers: str) -> dict[str, str]:
    """``initialize`` + ``notifications/initialized``; the headers later requests send."""
    init = await http.post(
        url,
        json=rpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "1"},
            },
        ),
        headers={**MCP_HEADERS, **headers},
    )
    assert init.status_code == 200, init.text
    session = {**MCP_HEADERS, **headers, "Mcp-Session-Id": init.headers["mcp-session-id"]}
    session["MCP-Protocol-Version"] = "2025-06-18"
    done = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
    )
    assert done.status_code == 202, done.text
    return session


async def upstream_runs(upstream_url: str) -> dict[str, int]:
    """How often each tool ran on the upstream."""
    async with httpx.AsyncClient() as http:
        return dict((await http.get(f"{upstream_url}/_control/runs")).json())
