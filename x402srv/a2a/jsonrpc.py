"""JSON-RPC 2.0 envelopes as A2A 0.3.0 uses them (A2A spec 6.11, 6.12, 8).

No I/O and no A2A semantics here: bytes become an ``RpcCall`` or an ``RpcError``
that already carries the ``id`` the answer must echo, and results and errors
become response documents. Parsing never raises anything else, so a malformed
body can only ever be answered with -32700 or -32600, never with a 500.

    -32700 Parse error       the body is not JSON, holds NaN/Infinity, or has more
                             arrays/objects than any request needs
    -32600 Invalid Request   JSON, but not one request object with jsonrpc "2.0",
                             a string ``method``, an ``id`` that is a string or
                             integer when present, and object ``params``; batches
                             are refused the same way
    -32601 Method not found  (decided by the service, raised as ``RpcError``)
    -32602 Invalid params
    -32603 Internal error
    -32001 .. -32009         A2A errors (0.3 spec 8.2; -32009 is 1.0's VersionNotSupported)

``data`` is an object in 0.3 and, in 1.0 (docs/protocol/a2a.md), an array of
ProtoJSON ``Any`` messages: a ``google.rpc.ErrorInfo`` (``reason`` in
UPPER_SNAKE_CASE, ``domain`` ``a2a-protocol.org``, the object's fields as its
string ``metadata``) for an A2A error, a ``google.protobuf.Struct`` holding the
object for a standard JSON-RPC one.

The ``id`` is echoed whenever it could be read as a string or integer, else it
is ``null`` (spec 6.11.2: "if there was an error in detecting the id").

A request without an ``id`` (or with ``"id": null``) is still read to the end:
an unknown method is -32601 and bad params are -32602, as the A2A TCK and the
``a2a-sdk`` server answer. Only a call that is valid in every other way is
refused as -32600 for its missing id (``RpcCall.has_id``): every A2A method
has an answer, so none is a JSON-RPC notification.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

from x402srv.wire.protocol import bounded_json

__all__ = [
    "CONTENT_TYPE_NOT_SUPPORTED",
    "EXTENDED_CARD_NOT_CONFIGURED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "PUSH_NOT_SUPPORTED",
    "TASK_NOT_CANCELABLE",
    "TASK_NOT_FOUND",
    "UNSUPPORTED_OPERATION",
    "VERSION_NOT_SUPPORTED",
    "RequestId",
    "RpcCall",
    "RpcError",
    "details_v1",
    "error_response",
    "missing_id",
    "parse_body",
    "read_call",
    "result_response",
    "sniff_envelope",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
TASK_NOT_FOUND: Final = -32001
TASK_NOT_CANCELABLE: Final = -32002
PUSH_NOT_SUPPORTED: Final = -32003
UNSUPPORTED_OPERATION: Final = -32004
CONTENT_TYPE_NOT_SUPPORTED: Final = -32005
EXTENDED_CARD_NOT_CONFIGURED: Final = -32007
VERSION_NOT_SUPPORTED: Final = -32009

#: The spec's "typical message" for each code (A2A 8.1, 8.2).
MESSAGES: Final[dict[int, str]] = {
    PARSE_ERROR: "Invalid JSON payload",
    INVALID_REQUEST: "Invalid JSON-RPC Request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid method parameters",
    INTERNAL_ERROR: "Internal server error",
    TASK_NOT_FOUND: "Task not found",
    TASK_NOT_CANCELABLE: "Task cannot be canceled",
    PUSH_NOT_SUPPORTED: "Push Notification is not supported",
    UNSUPPORTED_OPERATION: "This operation is not supported",
    CONTENT_TYPE_NOT_SUPPORTED: "Incompatible content types",
    EXTENDED_CARD_NOT_CONFIGURED: "Authenticated Extended Card is not configured",
    VERSION_NOT_SUPPORTED: "Version not supported",
}

#: ErrorInfo ``reason`` of each A2A error (1.0: the error's name without "Error").
REASONS: Final[dict[int, str]] = {
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
    EXTENDED_CARD_NOT_CONFIGURED: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
}
ERROR_DOMAIN: Final = "a2a-protocol.org"
ERROR_INFO_TYPE: Final = "type.googleapis.com/google.rpc.ErrorInfo"
STRUCT_TYPE: Final = "type.googleapis.com/google.protobuf.Struct"

RequestId = str | int | None


def _metadata(data: Any) -> dict[str, str]:
    """ErrorInfo metadata is a map of strings: other values are written as JSON."""
    if not isinstance(data, dict):
        return {} if data is None else {"detail": json.dumps(data, separators=(",", ":"))}
    return {
        str(key): value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        for key, value in data.items()
    }


def details_v1(code: int, data: Any) -> list[dict[str, Any]]:
    """1.0's ``data``: ErrorInfo for an A2A error, the object as a Struct for the rest."""
    reason = REASONS.get(code)
    if reason is not None:
        info = {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": ERROR_DOMAIN}
        return [{**info, "metadata": _metadata(data)}]
    if data is None:
        return []
    value = data if isinstance(data, dict) else {"detail": data}
    return [{"@type": STRUCT_TYPE, "value": value}]


class RpcError(Exception):
    """A JSON-RPC error answer: code, the spec's message, optional ``data``.

    ``data`` is written for the client (secret-free, like a problem ``detail``).
    """

    def __init__(
        self,
        code: int,
        data: Any = None,
        *,
        message: str | None = None,
        request_id: RequestId = None,
    ) -> None:
        self.code = code
        self.message = message or MESSAGES.get(code, "Server error")
        self.data = data
        self.request_id = request_id
        super().__init__(f"{code} {self.message}")

    def to_error(self, *, v10: bool = False) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if v10:
            details = details_v1(self.code, self.data)
            if details:
                error["data"] = details
        elif self.data is not None:
            error["data"] = self.data
        return error


@dataclass(frozen=True, slots=True)
class RpcCall:
    """One well-formed envelope: its id (None when absent), method name and (object) params."""

    request_id: str | int | None
    method: str
    params: dict[str, Any]

    @property
    def has_id(self) -> bool:
        return self.request_id is not None


def _finite(value: Any) -> bool:
    """No NaN/Infinity anywhere (Python's parser accepts them; JSON has no such numbers)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(item) for item in value.values())
    if isinstance(value, list):
        return all(_finite(item) for item in value)
    return True


def parse_body(raw: bytes) -> Any:
    """Strict JSON; anything unreadable is -32700 with ``id: null``.

    ``protocol.bounded_json`` counts the containers before the C parser recurses:
    a body of ``[[[[...`` could otherwise overflow the C stack and kill the worker
    (the recursion limit is lifted by a dependency). The bound also keeps the walk
    for NaN shallow.
    """
    try:
        document = bounded_json(raw)
    except ValueError:  # also bad UTF-8, over-long integers, too many containers
        raise RpcError(PARSE_ERROR) from None
    if not _finite(document):
        raise RpcError(PARSE_ERROR, {"detail": "NaN and Infinity are not JSON numbers"})
    return document


def sniff_envelope(raw: bytes) -> dict[str, Any] | None:
    """The parsed body when it is meant as JSON-RPC 2.0 (``"jsonrpc": "2.0"`` and a method).

    Lets ``POST /x402/access`` serve both protocols: anything else (including
    bodies that are not JSON at all) stays with the x402 flow and its own errors.
    A body without the bytes ``jsonrpc`` (and without a backslash-u escape that
    could spell them) cannot be an envelope, so the x402 flow's bodies are not parsed
    twice.
    """
    if b"jsonrpc" not in raw and b"\\u" not in raw:
        return None
    try:
        document = parse_body(raw)
    except RpcError:
        return None
    if isinstance(document, dict) and document.get("jsonrpc") == "2.0" and "method" in document:
        return document
    return None


def _readable_id(document: dict[str, Any]) -> RequestId:
    value = document.get("id")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def missing_id() -> RpcError:
    """The answer to a valid call without an id (checked after the method and params)."""
    detail = '"id" must be a string or an integer (A2A requests expect an answer)'
    return RpcError(INVALID_REQUEST, {"detail": detail})


def read_call(document: Any) -> RpcCall:
    """Check the envelope of an already-parsed body; a missing id is judged later."""
    if not isinstance(document, dict):
        what = "a batch" if isinstance(document, list) else "not a JSON object"
        raise RpcError(INVALID_REQUEST, {"detail": f"the request is {what}; send one object"})
    request_id = _readable_id(document)

    def invalid(detail: str) -> RpcError:
        return RpcError(INVALID_REQUEST, {"detail": detail}, request_id=request_id)

    if document.get("jsonrpc") != "2.0":
        raise invalid('"jsonrpc" must be "2.0"')
    method = document.get("method")
    if not isinstance(method, str) or not method:
        raise invalid('"method" must be a non-empty string')
    if request_id is None and document.get("id") is not None:
        raise invalid('"id" must be a string or an integer')
    params = document.get("params", {})
    if isinstance(params, list):
        raise RpcError(
            INVALID_PARAMS,
            {"detail": "A2A methods take named params (an object)"},
            request_id=request_id,
        )
    if not isinstance(params, dict):
        raise invalid('"params" must be an object')
    return RpcCall(request_id=request_id, method=method, params=params)


def result_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(
    error: RpcError, request_id: RequestId | None = None, *, v10: bool = False
) -> dict[str, Any]:
    """The error document; the id is the call's when known, else what the parser could read."""
    echo = request_id if request_id is not None else error.request_id
    return {"jsonrpc": "2.0", "id": echo, "error": error.to_error(v10=v10)}
