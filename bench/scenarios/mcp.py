"""Credit-metered MCP tool calls through x402srv against the same MCP server called directly.

``bench.mcp_app`` (FastMCP, stateless, JSON answers) serves one tool. x402srv
sells it at ``[[mcp]] path = "/mcp"``, one credit a call of a plan that sells
calls. A buyer buys the plan with the official client; wrk then sends the same
``tools/call`` POST to the server directly and, with the token, through
x402srv, in alternating runs (drift on a shared machine hits both). Through
x402srv every call is parsed, its token verified, a credit spent in the store
(one round trip) and the answer rewritten with the RateLimit ``_meta``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..stack import Stack
from ..table import Row, verdict
from ..wrk import Load, WrkResult, run_wrk
from .guard import buy_token
from .metering import _combine

__all__ = ["run"]

SECTION = "MCP tool calls (1 worker): one credit spent per tools/call"
CREDITS = 1_000_000_000
ROUNDS = 3
PLANS: list[dict[str, Any]] = [
    {"plan_id": "calls", "unit_amount": "$0.10", "description": "Tool calls", "calls": CREDITS},
]
CALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "forecast", "arguments": {"city": "berlin"}},
    }
)
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


def run(stack: Stack, load: Load) -> list[Row]:
    upstream = stack.mcp_upstream()
    mcp = [{"path": "/mcp", "upstream": f"{upstream}/mcp", "tools": {"forecast": {"cost": 1}}}]
    server = stack.x402srv(
        stack.config(store="sqlite", settlement="gas-wallet", plans=PLANS, mcp=mcp), "mcp"
    )
    try:
        token = buy_token(server.access_url, stack, plan_id="calls")
        targets = {
            "through": (f"{server.url}/mcp", {**HEADERS, "Authorization": f"Bearer {token}"}),
            "direct": (f"{upstream}/mcp", HEADERS),
        }
        through, direct = _interleaved(targets, load)
    finally:
        stack.stop_app(upstream)
        stack.stop_server(server)
    ratio = through.requests_per_second / direct.requests_per_second
    return [
        Row(SECTION, "tools/call to the MCP server directly (FastMCP, uvicorn)", direct.summary()),
        Row(
            SECTION,
            "tools/call through x402srv (token, a credit spent, sqlite)",
            through.summary(),
            (verdict(">= 60% of direct calls", ratio >= 0.6, f"{ratio:.0%}"),),
        ),
    ]


def _interleaved(
    targets: dict[str, tuple[str, dict[str, str]]], load: Load
) -> tuple[WrkResult, WrkResult]:
    share = replace(load, seconds=float(max(3, round(load.seconds / ROUNDS))))  # wrk: whole s
    results: dict[str, list[WrkResult]] = {name: [] for name in targets}
    order = list(targets)
    for round_ in range(ROUNDS):
        for name in order if round_ % 2 == 0 else reversed(order):
            url, headers = targets[name]
            results[name].append(run_wrk(url, share, method="POST", body=CALL, headers=headers))
    combined = [_combine(results[name], share.seconds) for name in order]
    return combined[0], combined[1]
