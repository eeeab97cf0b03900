"""Forward one admitted request to its route's upstream, streaming both ways.

Request: method, raw path (the prefix stripped if the route says so) and raw
query exactly as received, body streamed as it arrives (bounded by
``max_body_bytes``). Headers: hop-by-hop ones (and those ``Connection`` names)
dropped, ``Host`` left to the upstream URL, ``Authorization`` and
``PAYMENT-SIGNATURE`` removed (they are the buyer's credentials with us, not
with the upstream), every client ``X-X402-*``, ``X-Forwarded-*`` and the
route's secret header removed (a client must not be able to claim a plan or
the gateway's identity), then ``X-X402-Plan`` / ``X-X402-Request-Id`` /
``X-X402-Payer``, ``X-Forwarded-For/Host/Proto`` and the route's shared secret
added.

Response: status, headers (hop-by-hop and ``X-X402-*`` dropped) and body
streamed back as the upstream sends it, undecoded. An upstream that cannot be
reached or broke before answering is 502 ``UPSTREAM_UNAVAILABLE``, one that
exceeds the route's timeouts 504 ``UPSTREAM_TIMEOUT``. If it breaks after the
answer started, the connection is cut so the client sees a truncated body,
never a complete-looking one.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final

import httpx
from sanic import Request
from sanic.compat import Header

from x402srv.config.routes import RouteConfig
from x402srv.errors import InvalidRequest, ProblemError, UpstreamTimeout, UpstreamUnavailable
from x402srv.gateway.metered import Ending
from x402srv.gateway.trailers import send_trailers, upstream_trailers
from x402srv.server.tasks import detached, to_the_end
from x402srv.tokens.verify import AccessClaims

__all__ = [
    "HOP_BY_HOP",
    "first_byte_trace",
    "forward",
    "release_upstream",
    "request_headers",
    "response_headers",
    "upstream_body",
    "upstream_url",
]

#: RFC 9110 7.6.1, plus the legacy names proxies still see.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_CREDENTIALS: Final = frozenset({"authorization", "payment-signature"})
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}")
_SET_BY_GATEWAY: Final = frozenset(
    {"host", "expect", "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto"}
)
#: Cache fields besides ``Cache-Control`` and RFC 9213's ``*Cache-Control`` ones
#: (Fastly's and Varnish's, Akamai's older one; ``Expires`` yields to ``Cache-Control``).
_OTHER_CACHE_FIELDS: Final = frozenset({"surrogate-control", "edge-control"})

log = logging.getLogger("x402srv.gateway")


class _BodyTooLarge(InvalidRequest):
    pass


def _connection_listed(headers: Iterable[tuple[str, str]]) -> set[str]:
    return {
        token.strip().lower()
        for name, value in headers
        if name.lower() == "connection"
        for token in value.split(",")
    }


def request_headers(
    headers: Iterable[tuple[str, str]],
    route: RouteConfig,
    claims: AccessClaims,
    *,
    client_ip: str,
    host: str,
    scheme: str,
) -> list[tuple[str, str]]:
    """The headers the upstream receives (see the module docstring)."""
    headers = list(headers)
    drop = HOP_BY_HOP | _CREDENTIALS | _SET_BY_GATEWAY | _connection_listed(headers)
    drop |= {route.secret_header.lower()}
    kept = [
        (name, value)
        for name, value in headers
        if name.lower() not in drop and not name.lower().startswith("x-x402-")
    ]
    kept += [("X-X402-Plan", claims.plan_id), ("X-X402-Request-Id", claims.request_id)]
    if claims.payer and _ADDRESS.fullmatch(claims.payer):
        # Only an address: a token issued before the payer came from the signature
        # alone may carry whatever a facilitator answered (docs/settlement.md).
        kept.append(("X-X402-Payer", claims.payer))
    if route.usage is not None and route.usage.source == "sse":
        # The gateway reads the stream's usage event: it must arrive undecoded.
        kept = [(n, v) for n, v in kept if n.lower() != "accept-encoding"]
        kept.append(("Accept-Encoding", "identity"))
    if route.usage is not None and route.usage.source == "trailer":
        kept.append(("TE", "trailers"))  # the gateway reads the answer's trailer fields
    if route.secret is not None:
        kept.append((route.secret_header, route.secret.reveal()))
    kept += [("X-Forwarded-Proto", scheme), ("X-Forwarded-Host", host)]
    if client_ip:
        kept.append(("X-Forwarded-For", client_ip))
    return kept


def response_headers(
    headers: httpx.Headers, extra: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The upstream's response headers for the client; ``extra`` replaces same-named ones.

    When ``extra`` says ``Cache-Control: no-store`` (an answer that carries a new
    token: docs/gateway.md), none of the upstream's fields that let a cache keep
    it stays either: a CDN obeys its own field (RFC 9213's ``CDN-Cache-Control``
    and the fields named for one CDN, ``Surrogate-Control``) over ``Cache-Control``.
    """
    pairs = list(headers.multi_items())
    drop = HOP_BY_HOP | _connection_listed(pairs) | {k.lower() for k in extra or {}}
    stored_nowhere = any(
        name.lower() == "cache-control" and value == "no-store"
        for name, value in (extra or {}).items()
    )
    kept = [
        (name, value)
        for name, value in pairs
        if name.lower() not in drop
        and not name.lower().startswith("x-x402-")
        and not (stored_nowhere and cache_field(name))
    ]
    return kept + list((extra or {}).items())


def cache_field(name: str) -> bool:
    """Whether a response field tells some cache how long it may keep the answer."""
    lowered = name.lower()
    return lowered.endswith("cache-control") or lowered in _OTHER_CACHE_FIELDS


def upstream_url(route: RouteConfig, raw_path: str, raw_query: str) -> httpx.URL:
    """``<upstream><path>[?query]`` with the path and query bytes as the client sent them."""
    path = raw_path
    if route.strip_prefix and route.prefix_segments:
        # Segment by segment: the route matched the DECODED segments, and
        # ``gateway_segments`` made sure raw and decoded segments correspond.
        rest = raw_path[1:].split("/")[len(route.prefix_segments) :]
        path = "/" + "/".join(rest) if rest else ""
    query = f"?{raw_query}" if raw_query else ""
    return httpx.URL(route.upstream + path + query)


async def _body(request: Request, limit: int) -> AsyncIterator[bytes]:
    stream: Any = request.stream  # Sanic's Http object; its type does not declare __aiter__
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise _BodyTooLarge(f"the request body is larger than {limit} bytes")
        yield chunk


def _has_body(request: Request) -> bool:
    return bool(request.stream is not None and request.stream.request_body)


def _declared_length(request: Request) -> int | None:
    value = request.headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


def upstream_body(upstream: httpx.Response) -> AsyncIterable[bytes]:
    """``upstream``'s body as it arrives, undecoded, left open for ``release_upstream``.

    httpx's own readers (``aiter_raw``, ``aread``) close the response once its
    body is over, in the handler's task. A buyer who leaves at that moment
    cancels that close half-way (httpcore's close yields to the loop on a
    lock), and httpcore never runs it again: its stream already counts as
    closed, so the connection stays checked out of the pool for good. ``wrk``
    ending its runs lost about one connection in a hundred buyers it cut off
    that way, until the pool's 100 were gone and every call waited for it: 504.
    Read through this, the only close is ``release_upstream``'s.
    """
    stream = upstream.stream
    if not isinstance(stream, httpx.AsyncByteStream):  # (a client built without async)
        raise TypeError(f"not an async upstream answer: {type(stream).__name__}")
    return stream


async def release_upstream(upstream: httpx.Response) -> None:
    """Close ``upstream`` and hand its connection back to the pool, even if cancelled meanwhile.

    Sanic cancels a handler whose client went away. When the client went away
    while the handler wrote to it (Sanic's ``send`` then raises at once and
    ``connection_lost`` cancels the task a moment later), the cancellation lands
    inside this close: httpcore's closing steps await (a lock, the socket), and a
    cancelled close leaves the connection checked out for good, past the pool's
    reach (httpcore's own shields do not stop a plain ``Task.cancel``). Enough of
    those and every call waits for the pool until its timeout: 504. So the close
    runs in a task of its own, which the handler's cancellation does not reach.
    An answer whose close has started already (a metered stream's, as it ends)
    is left to that close, which runs to its end the same way.
    """
    if upstream.is_closed:
        return
    await to_the_end(upstream.aclose())


def first_byte_trace(sending: Callable[[], None]) -> Callable[[str, Any], Awaitable[None]]:
    """An httpcore ``trace`` callback that calls ``sending`` as the request's headers start out."""

    async def trace(event: str, _info: Any) -> None:
        # ("http11." today: the upstream client speaks HTTP/1.1; "http2." would name it too)
        if event.endswith(".send_request_headers.started"):
            sending()

    return trace


def _problem(exc: httpx.HTTPError) -> ProblemError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout("The upstream API did not answer in time.")
    return UpstreamUnavailable("The upstream API cannot be reached.")


async def forward(
    client: httpx.AsyncClient,
    request: Request,
    route: RouteConfig,
    claims: AccessClaims,
    *,
    extra_response_headers: Mapping[str, str] | None = None,
    on_status: Callable[[int, httpx.Headers], Awaitable[Mapping[str, str]]] | None = None,
    watch: Callable[[bytes], None] | None = None,
    tail: Callable[[httpx.Headers], Awaitable[Ending]] | None = None,
    sending: Callable[[], None] | None = None,
) -> int | None:
    """Send the upstream's answer through ``request.respond``, or raise a ``ProblemError``.

    Raised only before the answer starts (nothing was sent to the client yet).
    Returns the upstream's status, or None when it broke in the middle of its
    answer (metered calls get their credits back for either failure).
    ``on_status`` hears the upstream's status and headers before the answer
    starts and returns more headers for it (a metered call's refund, its
    settlement when the cost is in a header, and RateLimit fields). ``watch``
    sees each chunk as it passes (a stream's usage events); ``tail`` hears the
    upstream's trailer fields once its last chunk passed, and answers what ends
    the buyer's answer (x402srv's usage event, its own trailer fields).
    ``sending`` hears the moment the call's first byte goes out to the upstream
    (httpcore's ``trace`` extension): before it, the upstream has seen nothing.
    """
    declared = _declared_length(request)
    if declared is not None and declared > route.max_body_bytes:
        raise InvalidRequest(f"the request body is larger than {route.max_body_bytes} bytes")
    upstream_request = client.build_request(
        request.method,
        upstream_url(route, request.path, request.query_string),
        headers=request_headers(
            request.headers.items(),
            route,
            claims,
            client_ip=request.remote_addr or request.ip,
            host=request.host,
            scheme=request.scheme,
        ),
        content=_body(request, route.max_body_bytes) if _has_body(request) else None,
        timeout=httpx.Timeout(
            route.read_timeout_seconds,
            connect=route.connect_timeout_seconds,
            pool=route.connect_timeout_seconds,
        ),
        extensions={"trace": first_byte_trace(sending)} if sending is not None else None,
    )
    try:
        upstream = await client.send(upstream_request, stream=True)
    except _BodyTooLarge:
        raise
    except httpx.HTTPError as exc:
        log.warning("upstream %s for %s failed: %s", route.upstream, route.prefix, repr(exc))
        raise _problem(exc) from None
    try:
        extra = dict(extra_response_headers or {})
        if on_status is not None:
            extra.update(await on_status(upstream.status_code, upstream.headers))
        response = await request.respond(
            status=upstream.status_code,
            headers=Header(response_headers(upstream.headers, extra)),
        )
        try:
            async for chunk in upstream_body(upstream):
                if watch is not None:
                    watch(chunk)
                await response.send(chunk)
        except httpx.HTTPError as exc:
            log.warning("upstream %s broke mid-answer: %s", route.upstream, repr(exc))
            if request.transport is not None:
                request.transport.close()  # no final chunk: the client sees the truncation
            return None
        if tail is not None:
            # The upstream's answer is over: its connection goes back to the pool while
            # the call settles (a store step), not after. Held through the settlement, more
            # connections were busy at once and the pool closed and opened more. The
            # settlement starts before anything is awaited: a buyer who leaves now cancels
            # this handler at its next await, and one before the settlement started would
            # turn a finished call into an abandoned one, charged without the upstream's
            # report (docs/selling-calls.md, "Charging by use").
            trailers = upstream_trailers(upstream)
            closing = detached(upstream.aclose())  # (``release_upstream``'s, started now)
            ending = await tail(trailers)
            await asyncio.shield(closing)
            # The final event and the trailer section go out in one write when both can.
            if ending.trailers and await send_trailers(response, ending.trailers, ending.tail):
                return upstream.status_code
            if ending.tail:
                await response.send(ending.tail)
        await response.eof()
    finally:
        await release_upstream(upstream)
    return upstream.status_code
