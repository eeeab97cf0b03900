"""Call paid MCP tools through x402srv: the official x402.mcp session pays, the token then calls."""

from typing import Any

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from x402 import x402Client
from x402.mcp import MCPToolCallResult, x402MCPSession


# --8<-- [start:pay]
async def pay_and_call(
    url: str, client: x402Client, tool: str, arguments: dict[str, Any]
) -> tuple[MCPToolCallResult, dict[str, Any] | None]:
    """Call ``tool``, paying what x402srv asks; the result and the AccessGrant it bought."""
    async with (
        streamable_http_client(url) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        paying = x402MCPSession(session, client)  # client: as in "Buying from Python"
        await paying.initialize()
        result = await paying.call_tool(tool, arguments)
    meta = result.raw_result.meta or {}
    return result, meta.get("x402srv/grant")  # the grant: only when a plan was bought


# --8<-- [end:pay]


# --8<-- [start:token]
async def call_with_token(
    url: str, token: str, tool: str, arguments: dict[str, Any]
) -> CallToolResult:
    """A plain mcp client: the grant's token in the Authorization header, no x402 code."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await session.call_tool(tool, arguments)


# --8<-- [end:token]
