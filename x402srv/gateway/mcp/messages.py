"""JSON-RPC on the MCP gateway: what a buyer may send, and the answers x402srv writes itself.

A POST to an ``[[mcp]]`` path carries ONE JSON-RPC message (MCP's Streamable
HTTP transport; batches left the protocol in 2025-06-18). ``parse_message``
refuses, before anything else reads it:

- a body that is not JSON (``-32700``), a batch, a non-object, a message without
  ``jsonrpc: "2.0"`` or with a method, id or params of the wrong type (``-32600``);
- a ``tools/call`` without an id (a notification): it would be run and answered
  to no one, so it could never be paid for (``-32600``).

Each of these is a JSON-RPC error with HTTP status 400, answered by x402srv:
the upstream never sees it and nothing is stored. Everything else (requests,
notifications and a client's responses) goes on to the decision.

The x402 MCP transport's payment-required answer is a tool result, not an
error: ``isError: true``, the ``PaymentRequired`` in ``structuredContent`` and
the same JSON in ``content[0].text`` (docs/mcp.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from x402srv.wire.protocol import JsonTooDeep, bounded_json

__all__ = [
    "GRANT_META",
    "PAYMENT_META",
    "PAYMENT_RESPONSE_META",
    "PRICE_META",
    "RATELIMIT_META",
    "Message",
    "RpcError",
    "error_message",
    "parse_message",
    "payment_required_result",
]

PAYMENT_META: Final = "x402/payment"
PAYMENT_RESPONSE_META: Final = "x402/payment-response"
#: x402srv's own ``_meta`` keys: the AccessGrant a payment bought, a metered call's
#: RateLimit fields, a tool's price in ``tools/list``.
GRANT_META: Final = "x402srv/grant"
RATELIMIT_META: Final = "x402srv/ratelimit"
PRICE_META: Final = "x402srv/price"

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602
#: x402srv's refusals of a well-formed call (a bad token, a rate limit, an outage):
#: the problem details travel in ``error.data`` with their stable ``code``.
REFUSED: Final = -32000


class RpcError(Exception):
    """A JSON-RPC error x402srv answers itself (``status``: the HTTP status it goes with)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        data: dict[str, Any] | None = None,
        status: int = 400,
        id: str | int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.status = status
        self.id = id

    def body(self) -> dict[str, Any]:
        return error_message(self.id, self.code, self.message, self.data)


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message a buyer sent, already checked for shape."""

    kind: Literal["request", "notification", "response"]
    document: dict[str, Any]
    method: str | None = None
    id: str | int | None = None

    @property
    def params(self) -> dict[str, Any]:
        params = self.document.get("params")
        return params if isinstance(params, dict) else {}


def _invalid(message: str, id: str | int | None = None) -> RpcError:
    return RpcError(INVALID_REQUEST, f"Invalid Request: {message}", id=id)


def parse_message(raw: bytes) -> Message:
    """One message of a POST body, or ``RpcError`` (see the module docstring)."""
    try:
        document = bounded_json(raw)
    except (JsonTooDeep, ValueError):
        raise RpcError(PARSE_ERROR, "Parse error: the body is not one JSON document") from None
    if isinstance(document, list):
        raise _invalid("batches are not accepted: send one JSON-RPC message per request")
    if not isinstance(document, dict) or document.get("jsonrpc") != "2.0":
        raise _invalid('a JSON-RPC 2.0 object is expected ("jsonrpc": "2.0")')
    raw_id = document.get("id")
    if "id" in document and (
        isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or len(str(raw_id)) > 256
    ):
        raise _invalid("id must be a string or an integer")
    id = raw_id if "id" in document else None
    method = document.get("method")
    if method is None:
        if "id" not in document or ("result" in document) == ("error" in document):
            raise _invalid("a response has an id and exactly one of result or error", id)
        return Message("response", document, id=id)
    if not isinstance(method, str) or not method or len(method) > 256:
        raise _invalid("method must be a non-empty string", id)
    if "params" in document and not isinstance(document["params"], dict):
        raise _invalid("params must be an object", id)
    if "id" not in document:
        if method == "tools/call":
            raise _invalid("tools/call must be a request with an id, not a notification")
        return Message("notification", document, method=method)
    return Message("request", document, method=method, id=id)


def error_message(
    id: str | int | None, code: int, message: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": error}


def payment_required_result(required: dict[str, Any]) -> dict[str, Any]:
    """The x402 MCP transport's payment-required tool result for ``required``."""
    return {
        "isError": True,
        "structuredContent": required,
        "content": [{"type": "text", "text": json.dumps(required, separators=(",", ":"))}],
    }
