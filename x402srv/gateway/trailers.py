"""HTTP trailers on both sides of the gateway: read the upstream's, send the buyer's.

A chunked answer may end with a trailer section (RFC 9110 6.5): fields that
are only known once the body is over, such as what producing it cost. Neither
of the two HTTP stacks the gateway stands on offers them:

- httpx (on httpcore's HTTP/1.1, h11 underneath) reads the upstream's trailer
  section and drops it. ``capture_upstream_trailers()`` replaces httpcore's
  body loop with the same loop that also keeps h11's ``EndOfMessage`` fields in
  the request's extensions (httpx shares that dict with httpcore), where
  ``upstream_trailers`` finds them. The replacement is installed once, only by
  a gateway with a route whose cost is in a trailer (``from = "trailer"``),
  and refuses to start (``RuntimeError``) when httpcore no longer has the loop.
  HTTP/2 upstreams are not read this way (the gateway's client speaks HTTP/1.1).
- Sanic ends a chunked answer with an empty trailer section and has no API to
  fill it. ``send_trailers`` ends the answer itself: it takes over the last
  chunk of Sanic's HTTP/1.1 writer, so the trailer fields follow the last chunk
  of the body. An answer that is not chunked (it has a ``Content-Length``, or
  is a HEAD answer) cannot carry trailers, and ``send_trailers`` says so.

docs/selling-calls.md, "Charging by use", is the seller's and buyer's view.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import h11
import httpx
from sanic.http import Stage
from sanic.http.http1 import Http
from sanic.response import HTTPResponse

__all__ = ["capture_upstream_trailers", "send_trailers", "upstream_trailers"]

#: Where the body loop leaves the trailer fields: the httpx request's extensions.
_EXTENSION: Final = "x402srv.trailers"
_FIELD_NAME: Final = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
_FIELD_VALUE: Final = re.compile(r"[\x20-\x7e\t]*")


def capture_upstream_trailers() -> None:
    """Keep the trailer fields of every HTTP/1.1 answer httpx reads (see the module docstring)."""
    from httpcore._async import http11

    connection: Any = http11.AsyncHTTP11Connection
    if getattr(connection, "_x402srv_trailers", False):
        return
    if not callable(getattr(connection, "_receive_event", None)) or not callable(
        getattr(connection, "_receive_response_body", None)
    ):
        raise RuntimeError(
            "this httpcore has no HTTP/1.1 body loop to read trailers from: "
            'from = "trailer" cannot work with it'
        )

    async def _receive_response_body(self: Any, request: Any) -> AsyncIterator[bytes]:
        # httpcore 1.0's loop, and the trailer fields kept where the caller finds them.
        timeout = request.extensions.get("timeout", {}).get("read", None)
        while True:
            event = await self._receive_event(timeout=timeout)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                if event.headers:
                    request.extensions[_EXTENSION] = [
                        (bytes(name), bytes(value)) for name, value in event.headers
                    ]
                break
            elif event is h11.PAUSED:
                break

    connection._receive_response_body = _receive_response_body
    connection._x402srv_trailers = True


def upstream_trailers(response: httpx.Response) -> httpx.Headers:
    """The trailer fields of an answer read to its end (empty: none, or not captured)."""
    return httpx.Headers(response.request.extensions.get(_EXTENSION, []))


async def send_trailers(
    response: HTTPResponse, fields: Mapping[str, str], last: bytes = b""
) -> bool:
    """End a chunked answer with ``last`` and ``fields`` as its trailer section.

    Called instead of ``response.eof()`` (after ``response.send(last)`` when it
    was not sent yet): the bytes are those of the two, written at once. When it
    answers False (the answer is not chunked) nothing was sent and the caller
    ends the answer as usual.
    """
    if not isinstance(response.stream, Http):
        return False
    http: Any = response.stream  # Sanic's HTTP/1.1 writer; its response_func is ours to set
    if http.response_func != http.http1_response_chunked:
        return False
    for name, value in fields.items():
        if not _FIELD_NAME.fullmatch(name) or not _FIELD_VALUE.fullmatch(value):
            raise ValueError(f"not a trailer field: {name!r}")
    section = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode("ascii")
    send = http._send

    async def last_chunk(data: bytes, end_stream: bool) -> None:
        # Sanic's ``http1_response_chunked``, with the trailer section in its last chunk.
        chunk = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        if not end_stream:
            if chunk:
                await send(chunk)
            return
        await send(chunk + b"0\r\n" + section + b"\r\n")
        http.response_func = None
        http.stage = Stage.IDLE

    http.response_func = last_chunk
    await response.send(last, end_stream=True)
    return True
