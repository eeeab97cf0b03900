"""Carry one MCP message to the upstream and its answer back, as it is produced.

The upstream speaks Streamable HTTP: a POST's answer is either one JSON
document or an SSE stream (progress notifications, then the response). Both
come back to the buyer as the upstream sends them; x402srv only rewrites the
one response that answers the buyer's request, and only for:

- ``tools/list``: each tool's price goes into its ``_meta["x402srv/price"]``;
- a ``tools/call`` x402srv admitted: the call's ``_meta`` gets the
  payment-response, the grant a payment bought and the RateLimit fields, after
  the credits of a failed call (``isError``, a JSON-RPC error, a broken
  upstream) went back (``refund_on_error``).

Headers: hop-by-hop ones, ``Authorization`` (the buyer's token is for x402srv),
``Host``, ``Content-Length``, ``Accept-Encoding`` (the upstream answers
uncompressed, so x402srv can read it) and every ``X-X402-*``/``X-Forwarded-*``
are dropped; ``Mcp-Session-Id`` and the rest pass both ways.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, Final

import httpx
from sanic import Request
from sanic.compat import Header

from x402srv.config.mcp import McpConfig
from x402srv.gateway.forward import HOP_BY_HOP, cache_field, first_byte_trace, upstream_body
from x402srv.tokens.verify import AccessClaims

__all__ = ["Rewrite", "request_headers", "send_upstream", "stream_answer"]

log = logging.getLogger("x402srv.gateway.mcp")

#: Rewrites the upstream's response to the buyer's request (a JSON-RPC document).
Rewrite = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_DROPPED: Final = HOP_BY_HOP | {
    "authorization",
    "payment-signature",
    "host",
    "content-length",
    "accept-encoding",
    "expect",
    "forwarded",
}
_DROPPED_BACK: Final = HOP_BY_HOP | {"content-length", "content-encoding"}


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }


def request_headers(
    headers: Iterable[tuple[str, str]], claims: AccessClaims | None
) -> list[tuple[str, str]]:
    """The headers the upstream receives (see the module docstring)."""
    pairs = list(headers)
    drop = _DROPPED | _connection_listed(pairs)
    kept = [
        (name, value)
        for name, value in pairs
        if name.lower() not in drop and not name.lower().startswith(("x-x402-", "x-forwarded-"))
    ]
    kept.append(("Accept-Encoding", "identity"))
    if claims is not None:
        kept += [("X-X402-Plan", claims.plan_id), ("X-X402-Request-Id", claims.request_id)]
    return kept


def response_headers(headers: httpx.Headers, *, stored_nowhere: bool) -> list[tuple[str, str]]:
    """The upstream's answer headers for the buyer.

    ``stored_nowhere``: the answer will carry a grant (a plan bought with the call),
    so no cache may keep it: ``Cache-Control: no-store`` instead of the upstream's
    cache fields, its CDN ones included (as the HTTP gateway does, docs/gateway.md).
    """
    pairs = list(headers.multi_items())
    drop = _DROPPED_BACK | _connection_listed(pairs)
    kept = [
        (name, value)
        for name, value in pairs
        if name.lower() not in drop
        and not name.lower().startswith("x-x402-")
        and not (stored_nowhere and cache_field(name))
    ]
    return [*kept, ("Cache-Control", "no-store")] if stored_nowhere else kept


async def send_upstream(
    client: httpx.AsyncClient,
    server: McpConfig,
    request: Request,
    body: bytes | None,
    claims: AccessClaims | None,
    *,
    sending: Callable[[], None] | None = None,
) -> httpx.Response:
    """Open the upstream's answer (streamed); ``httpx.HTTPError`` when it cannot be had.

    ``sending`` hears the moment the message's first byte goes out to the
    upstream (httpcore's ``trace`` extension, as the gateway's ``forward``):
    before it, the upstream has seen nothing.
    """
    long_lived = request.method == "GET"  # the server's own SSE stream: idle is normal
    upstream_request = client.build_request(
        request.method,
        server.upstream,
        headers=request_headers(request.headers.items(), claims),
        content=body,
        timeout=httpx.Timeout(
            None if long_lived else server.read_timeout_seconds,
            connect=server.connect_timeout_seconds,
            pool=server.connect_timeout_seconds,
        ),
        extensions={"trace": first_byte_trace(sending)} if sending is not None else None,
    )
    return await client.send(upstream_request, stream=True)


def _is_answer(document: Any, id: str | int | None) -> bool:
    return (
        isinstance(document, dict)
        and document.get("id") == id
        and ("result" in document or "error" in document)
    )


async def _sse_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """Whole SSE events (each with its blank line), as soon as each one is complete."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n")
        while (end := buffer.find(b"\n\n")) >= 0:
            yield buffer[: end + 2]
            buffer = buffer[end + 2 :]
    if buffer:
        yield buffer


async def _rewrite_event(
    event: bytes, id: str | int | None, rewrite: Rewrite
) -> tuple[bytes, bool]:
    """The event with its data rewritten if it is the answer; and whether it was."""
    lines = event.rstrip(b"\n").split(b"\n")
    data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
    try:
        document = json.loads(b"\n".join(data)) if data else None
    except ValueError:
        return event, False
    if not isinstance(document, dict) or not _is_answer(document, id):
        return event, False
    rewritten = json.dumps(await rewrite(document), separators=(",", ":")).encode()
    kept = [line for line in lines if not line.startswith(b"data:")]
    return b"\n".join([*kept, b"data: " + rewritten]) + b"\n\n", True


async def stream_answer(
    request: Request,
    upstream: httpx.Response,
    *,
    id: str | int | None,
    rewrite: Rewrite | None,
    stored_nowhere: bool = False,
) -> bool:
    """Send the upstream's answer to the buyer; whether the rewritten response went out.

    ``stored_nowhere``: a paid call's answer, which no cache may keep (``response_headers``).
    Without ``rewrite`` the bytes pass untouched. With it, a JSON answer is
    read whole and rewritten; an SSE answer passes event by event, each sent as
    soon as it is complete, the response event rewritten on its way.
    """
    headers = response_headers(upstream.headers, stored_nowhere=stored_nowhere)
    content_type = upstream.headers.get("content-type", "")
    response = await request.respond(status=upstream.status_code, headers=Header(headers))
    answered = False
    try:
        if rewrite is None or upstream.status_code >= 400:
            async for chunk in upstream_body(upstream):
                await response.send(chunk)
        elif content_type.startswith("text/event-stream"):
            async for event in _sse_events(upstream_body(upstream)):
                if not answered:
                    event, answered = await _rewrite_event(event, id, rewrite)
                await response.send(event)
        else:
            raw = b"".join([chunk async for chunk in upstream_body(upstream)])
            try:
                document = json.loads(raw)
            except ValueError:
                document = None
            if _is_answer(document, id):
                raw = json.dumps(await rewrite(document), separators=(",", ":")).encode()
                answered = True
            await response.send(raw)
    except httpx.HTTPError as exc:
        log.warning("MCP upstream %s broke mid-answer: %s", upstream.url, repr(exc))
        if request.transport is not None:
            request.transport.close()  # no final chunk: the client sees the truncation
        return answered
    await response.eof()
    return answered
