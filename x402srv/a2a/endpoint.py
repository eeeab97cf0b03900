"""HTTP <-> A2A JSON-RPC: the only part of the A2A layer that knows about Sanic.

Every JSON-RPC answer, error or not, is HTTP 200 ``application/json`` (A2A
clients read the error from the body, and the ``a2a-sdk`` client turns a
non-2xx status into a transport error that hides the code). The one exception
is a body over the size limit: the framework refused to read it, so the answer
is HTTP 413 (its body still the JSON-RPC -32600). The extension header a client
sent is echoed with the extensions this answer activated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sanic.response import HTTPResponse

from .extension import EXTENSION_HEADERS, activated_extensions
from .jsonrpc import INVALID_REQUEST, RpcError, error_response
from .service import A2AService

__all__ = ["A2AEndpoint"]

_HEADERS = {"Cache-Control": "no-store"}


class A2AEndpoint:
    def __init__(self, service: A2AService) -> None:
        self.service = service

    async def respond(self, body: bytes, headers: Mapping[str, str]) -> HTTPResponse:
        """``POST <a2a_path>``: any body, answered in JSON-RPC."""
        return self._response(await self.service.handle_bytes(body), headers)

    async def respond_document(
        self, document: dict[str, Any], headers: Mapping[str, str]
    ) -> HTTPResponse:
        """``POST /x402/access`` whose body was sniffed as a JSON-RPC envelope."""
        return self._response(await self.service.handle_document(document), headers)

    def too_large(self, limit: int, headers: Mapping[str, str]) -> HTTPResponse:
        """The framework refused an oversized body before any handler ran."""
        error = RpcError(INVALID_REQUEST, {"detail": f"the body is larger than {limit} bytes"})
        return self._response(error_response(error), headers, status=413)

    @staticmethod
    def _response(
        document: dict[str, Any], headers: Mapping[str, str], *, status: int = 200
    ) -> HTTPResponse:
        answer = dict(_HEADERS)
        for name in EXTENSION_HEADERS:
            value = headers.get(name)
            if value is None:
                continue
            activated = activated_extensions([value])
            if activated:
                answer[name] = ", ".join(activated)
        body = json.dumps(document, separators=(",", ":")).encode()
        return HTTPResponse(body, status, answer, "application/json")
