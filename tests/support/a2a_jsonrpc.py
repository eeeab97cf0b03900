"""Raw A2A JSON-RPC for the tests: messages, calls, SSE streams and checks.

Every 0.3 result is validated with ``a2a-sdk``'s v0.3 models (``a2a.compat.v0_3.types``)
and every 1.0 result with its protobuf types (``a2a.types.a2a_pb2``, unknown
fields refused), so a shape the official SDK cannot read fails the test that
produced it.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import httpx
from a2a.compat.v0_3 import types as v03
from a2a.types import a2a_pb2
from eth_account.signers.local import LocalAccount
from google.protobuf.json_format import ParseDict

from tests.support.seller import Seller
from x402srv.testing.buyers import signed_payment

X402_EXTENSION = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
STATUS = "x402.payment.status"
REQUIRED = "x402.payment.required"
PAYLOAD = "x402.payment.payload"
RECEIPTS = "x402.payment.receipts"
ERROR = "x402.payment.error"
V10 = {"A2A-Version": "1.0"}


def a2a_url(seller: Seller) -> str:
    base = str(seller.config.get("server", {}).get("base_path", ""))
    path = str(seller.config.get("server", {}).get("a2a_path", "/a2a"))
    return f"{seller.server.url}{base}{path}"


def message(
    *parts: dict[str, Any],
    task_id: str | None = None,
    context_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "kind": "message",
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": list(parts) or [text("hello")],
    }
    if task_id is not None:
        document["taskId"] = task_id
    if context_id is not None:
        document["contextId"] = context_id
    if metadata is not None:
        document["metadata"] = metadata
    return document


def text(value: str) -> dict[str, Any]:
    return {"kind": "text", "text": value}


def data(value: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "data", "data": value}


def call(
    url: str,
    method: str,
    params: Any,
    *,
    request_id: str | int = "req-1",
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One JSON-RPC call; the whole response document (HTTP 200 either way)."""
    envelope = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = httpx.post(url, json=envelope, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = dict(response.json())
    assert document["jsonrpc"] == "2.0"
    assert document["id"] == request_id
    return document


def result(document: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in document, document
    value = document["result"]
    assert isinstance(value, dict)
    return value


def task_of(document: dict[str, Any]) -> dict[str, Any]:
    task = result(document)
    v03.Task.model_validate(task)
    assert task["kind"] == "task"
    return task


def error_of(document: dict[str, Any], code: int) -> dict[str, Any]:
    """The error member; it must have exactly the spec's shape and the expected code."""
    assert "result" not in document, document
    error = dict(document["error"])
    v03.JSONRPCError.model_validate(error)
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


def error_data(error: dict[str, Any]) -> dict[str, Any]:
    """An error's data read alike in 0.3 (an object) and 1.0 (ErrorInfo metadata or a Struct)."""
    data = error["data"]
    if isinstance(data, dict):
        return data
    [detail] = data
    return dict(detail["metadata"] if "metadata" in detail else detail["value"])


def send(url: str, msg: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return call(url, "message/send", {"message": msg}, **kwargs)


def open_task(url: str, plan_id: str = "hourly", **fields: Any) -> dict[str, Any]:
    """A new task for a plan: input-required, asking for the payment."""
    task = task_of(send(url, message(data({"planId": plan_id, **fields}))))
    assert task["status"]["state"] == "input-required", task
    return task


def status_metadata(task: dict[str, Any]) -> dict[str, Any]:
    return dict(task["status"]["message"]["metadata"])


def required_of(task: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(dict(status_metadata(task)[REQUIRED]))


def payment_for(seller: Seller, buyer: LocalAccount, task: dict[str, Any]) -> dict[str, Any]:
    return signed_payment(buyer, seller.chain.token, required_of(task)["accepts"][0])


def pay(url: str, task: dict[str, Any], payment: Any, **kwargs: Any) -> dict[str, Any]:
    """Send a payment on a task; the whole response document."""
    metadata = {STATUS: "payment-submitted", PAYLOAD: payment}
    return send(
        url, message(text("Here is the payment."), task_id=task["id"], metadata=metadata), **kwargs
    )


def get(url: str, task_id: str) -> dict[str, Any]:
    return call(url, "tasks/get", {"id": task_id})


def grant_of(task: dict[str, Any]) -> dict[str, Any]:
    [artifact] = task["artifacts"]
    [part] = artifact["parts"]
    assert part["kind"] == "data"
    return dict(part["data"])


def catalog_task(url: str, *parts: dict[str, Any]) -> dict[str, Any]:
    """A new task for a message that names no plan: input-required, every plan offered."""
    task = task_of(send(url, message(*(parts or (text("What plans do you offer?"),)))))
    assert task["status"]["state"] == "input-required", task
    assert status_metadata(task)["x402srv.skill"] == "discover-products"
    return task


def v10_call(url: str, method: str, params: Any, **kwargs: Any) -> dict[str, Any]:
    """A 1.0 call (``A2A-Version: 1.0``); the whole response document."""
    headers = {**V10, **kwargs.pop("headers", {})}
    return call(url, method, params, headers=headers, **kwargs)


def v10_message(*parts: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A 1.0 user Message (ROLE_USER, parts without ``kind``)."""
    return {
        "messageId": str(uuid.uuid4()),
        "role": "ROLE_USER",
        "parts": list(parts) or [{"text": "hello"}],
        **fields,
    }


def v10_task(document: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 Task from a result; it must parse as ``a2a.Task`` with no unknown field."""
    value = result(document)
    task = value["task"] if set(value) == {"task"} else value
    ParseDict(task, a2a_pb2.Task())
    return dict(task)


def v10_status_metadata(task: dict[str, Any]) -> dict[str, Any]:
    return dict(task["status"]["message"]["metadata"])


def sse(url: str, method: str, params: Any, **headers: str) -> list[dict[str, Any]]:
    """A streaming call read to its end: every JSON-RPC document it sent, in order."""
    envelope = {"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params}
    with httpx.stream("POST", url, json=envelope, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
