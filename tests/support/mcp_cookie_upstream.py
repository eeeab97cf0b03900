"""The test MCP server with cookies: it sets one on every answer and records each it receives.

``uvicorn tests.support.mcp_cookie_upstream:app`` is ``tests.support.mcp_upstream``'s
FastMCP app (Streamable HTTP at ``/mcp``) inside a plain ASGI layer that adds
``Set-Cookie: upstream-session=<n>; Path=/`` to its answer to the n-th POST, as an
MCP server behind a sticky load balancer, or one that keeps a web session, would.
FastMCP itself neither sets nor reads cookies, so the layer does both here.
``GET /_control/cookies`` -> one entry per POST, in order: its JSON-RPC method
(``tools/call:<tool>`` for a call) and the ``Cookie`` header it came with (or null).
Every answer to a POST also lets every cache keep it for an hour, CDNs by their own
field (``CACHE_FIELDS``), as an upstream behind a CDN might.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from tests.support.mcp_upstream import app as mcp_app

#: The cache fields of every answer to a POST.
CACHE_FIELDS = {"cache-control": "public, max-age=3600", "cdn-cache-control": "max-age=3600"}
#: What each POST to /mcp came with, in order.
RECEIVED: list[dict[str, Any]] = []


def _method(body: bytes) -> str | None:
    """The JSON-RPC method of a POST body, with the tool's name for a ``tools/call``."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    method = document.get("method")
    params = document.get("params")
    if method == "tools/call" and isinstance(params, dict):
        return f"tools/call:{params.get('name')}"
    return method if isinstance(method, str) else None


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "http" and scope["path"] == "/_control/cookies":
        await JSONResponse(RECEIVED)(scope, receive, send)
        return
    if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/mcp"):
        await mcp_app(scope, receive, send)
        return
    cookies = [value.decode("latin-1") for name, value in scope["headers"] if name == b"cookie"]
    seen: dict[str, Any] = {"method": None, "cookie": "; ".join(cookies) or None}
    RECEIVED.append(seen)
    set_cookie = f"upstream-session={len(RECEIVED)}; Path=/".encode()
    body = b""

    async def reading() -> Message:
        nonlocal body
        message = await receive()
        if message["type"] == "http.request":
            body += message.get("body", b"")
            if not message.get("more_body", False):
                seen["method"] = _method(body)
        return message

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            cache = [(name.encode(), value.encode()) for name, value in CACHE_FIELDS.items()]
            headers = [*message["headers"], (b"set-cookie", set_cookie), *cache]
            message = {**message, "headers": headers}
        await send(message)

    await mcp_app(scope, reading, sending)
