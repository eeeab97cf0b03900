"""HTTP <-> A2A JSON-RPC: the only part of the A2A layer that knows about Sanic.

Every JSON-RPC answer, error or not, is HTTP 200 ``application/json`` (A2A
clients read the error from the body, and the ``a2a-sdk`` client turns a
non-2xx status into a transport error that hides the code). The one exception
is a body over the size limit: the framework refused to read it, so the answer
is HTTP 413 (its body still the JSON-RPC -32600). A streaming method answers
``text/event-stream``: one ``data:`` line per JSON-RPC response document (an
error ends the stream, also one before any event), and an SSE comment after
``HEARTBEAT_SECONDS`` without one: Sanic closes a response that writes nothing
for ``RESPONSE_TIMEOUT``, and a settlement whose outcome only the chain can tell
may keep a stream quiet longer than that. The extension header a client sent
is echoed with the extensions this answer activated.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any, Final

from sanic import Request
from sanic.response import HTTPResponse

from x402srv.a2a.extension import EXTENSION_HEADERS, activated_extensions
from x402srv.a2a.jsonrpc import INVALID_REQUEST, RpcError, error_response
from x402srv.a2a.service import A2AService, Answer
from x402srv.a2a.versions import VERSION_HEADER, errors_in_v1
from x402srv.usage.unpaid_limit import client_of

__all__ = ["A2AEndpoint"]

_HEADERS = {"Cache-Control": "no-store"}
_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
#: Seconds a stream may stay silent before a comment line keeps the connection open.
HEARTBEAT_SECONDS: Final = 15.0


def _compact(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _echo(headers: Mapping[str, str]) -> dict[str, str]:
    echoed: dict[str, str] = {}
    for name in EXTENSION_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        activated = activated_extensions([value])
        if activated:
            echoed[name] = ", ".join(activated)
    return echoed


class A2AEndpoint:
    def __init__(self, service: A2AService) -> None:
        self.service = service

    async def respond(self, request: Request) -> HTTPResponse | None:
        """``POST <a2a_path>``: any body, answered in JSON-RPC."""
        version = request.headers.get(VERSION_HEADER)
        answer = await self.service.handle_bytes(request.body, version, client=client_of(request))
        return await self._send(request, answer)

    async def respond_document(
        self, document: dict[str, Any], request: Request
    ) -> HTTPResponse | None:
        """``POST /x402/access`` whose body was sniffed as a JSON-RPC envelope."""
        version = request.headers.get(VERSION_HEADER)
        answer = await self.service.handle_document(document, version, client=client_of(request))
        return await self._send(request, answer)

    def too_large(self, limit: int, headers: Mapping[str, str]) -> HTTPResponse:
        """The framework refused an oversized body before any handler ran."""
        error = RpcError(INVALID_REQUEST, {"detail": f"the body is larger than {limit} bytes"})
        v10 = errors_in_v1(headers.get(VERSION_HEADER), None)
        body = _compact(error_response(error, v10=v10))
        return HTTPResponse(body, 413, {**_HEADERS, **_echo(headers)}, "application/json")

    async def _send(self, request: Request, answer: Answer) -> HTTPResponse | None:
        headers = _echo(request.headers)
        if isinstance(answer, dict):
            return HTTPResponse(_compact(answer), 200, {**_HEADERS, **headers}, "application/json")
        response = await request.respond(
            headers={**_STREAM_HEADERS, **headers}, content_type="text/event-stream"
        )
        documents = answer.documents
        following: asyncio.Task[dict[str, Any]] | None = None
        try:
            while True:
                following = following or asyncio.ensure_future(anext(documents))
                done, _ = await asyncio.wait({following}, timeout=HEARTBEAT_SECONDS)
                if not done:
                    await response.send(b": still here\n\n")
                    continue
                try:
                    document = following.result()
                except StopAsyncIteration:
                    break
                following = None
                await response.send(b"data: " + _compact(document) + b"\n\n")
        finally:
            # The client may have gone: the events stop, anything being settled goes on.
            if following is not None and not following.done():
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await following
            await documents.aclose()
        await response.eof()
        return None
