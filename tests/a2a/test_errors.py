"""Every JSON-RPC and A2A error code, each produced by a real request to a real server.

Codes: -32700 parse error, -32600 invalid request, -32601 method not found,
-32602 invalid params, -32603 internal error, -32001 task not found, -32002 task
not cancelable, -32003 push notifications not supported, -32004 unsupported
operation, -32005 content type not supported, -32007 extended card not
configured (-32009, version not supported, is in ``test_a2a_1_0``). Every answer
is HTTP 200 with a JSON-RPC body whose shape ``a2a-sdk``'s v0.3
``JSONRPCErrorResponse`` accepts; the ``id`` is echoed when it could be read,
else ``null``. Nothing here is ever a 500.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from a2a.compat.v0_3 import types as v03
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    PAYLOAD,
    STATUS,
    X402_EXTENSION,
    a2a_url,
    call,
    data,
    error_of,
    message,
    open_task,
    pay,
    payment_for,
    send,
    task_of,
    text,
)
from tests.support.faults import lockable_store, locked
from tests.support.seller import Seller


@pytest.fixture(scope="module")
def lockable(start_seller: Callable[..., Seller]) -> Seller:
    """One seller for this module whose sqlite store gives up on a held lock quickly."""
    return start_seller(
        "gas-wallet",
        store=lockable_store(),
    )


def post_raw(url: str, content: bytes, **headers: str) -> dict[str, Any]:
    response = httpx.post(
        url, content=content, headers={"content-type": "application/json", **headers}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    document = dict(response.json())
    v03.JSONRPCErrorResponse.model_validate(document)
    return document


def rpc_error(document: dict[str, Any], code: int, request_id: Any) -> dict[str, Any]:
    assert document["id"] == request_id
    v03.JSONRPCErrorResponse.model_validate(document)
    return error_of(document, code)


# ------------------------------------------------------------------ -32700 / -32600

MALFORMED: list[tuple[str, bytes, int, Any]] = [
    ("not JSON", b"{nope", -32700, None),
    ("NaN", b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":NaN}}', -32700, None),
    ("bad UTF-8", b'{"jsonrpc":"2.0","id":"\xff\xfe","method":"x"}', -32700, None),
    ("deep nesting", b"[" * 30_000 + b"]" * 30_000, -32700, None),
    ("unclosed nesting", b"[" * 65_000, -32700, None),
    ("unclosed objects", b'{"a":' * 13_000, -32700, None),
    ("huge integer", b'{"id":' + b"9" * 5000 + b"}", -32700, None),
    ("empty body", b"", -32700, None),
    ("batch", b'[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}}]', -32600, None),
    ("empty batch", b"[]", -32600, None),
    ("a string", b'"message/send"', -32600, None),
    ("jsonrpc 1.0", b'{"jsonrpc":"1.0","id":7,"method":"tasks/get"}', -32600, 7),
    ("no jsonrpc", b'{"id":"a","method":"tasks/get","params":{"id":"x"}}', -32600, "a"),
    ("no method", b'{"jsonrpc":"2.0","id":7}', -32600, 7),
    ("method not a string", b'{"jsonrpc":"2.0","id":7,"method":5}', -32600, 7),
    ("no id", b'{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"x"}}', -32600, None),
    (
        "id null",
        b'{"jsonrpc":"2.0","id":null,"method":"tasks/get","params":{"id":"x"}}',
        -32600,
        None,
    ),
    ("id fraction", b'{"jsonrpc":"2.0","id":1.5,"method":"tasks/get"}', -32600, None),
    ("id object", b'{"jsonrpc":"2.0","id":{},"method":"tasks/get"}', -32600, None),
    ("id boolean", b'{"jsonrpc":"2.0","id":true,"method":"tasks/get"}', -32600, None),
    ("params a string", b'{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":"x"}', -32600, 7),
]


@pytest.mark.parametrize(
    ("case", "body", "code", "request_id"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_envelopes(
    lockable: Seller, case: str, body: bytes, code: int, request_id: Any
) -> None:
    rpc_error(post_raw(a2a_url(lockable), body), code, request_id)


def test_advisory_deep_nesting_does_not_crash_the_server(lockable: Seller) -> None:
    """The C JSON parser's recursion once killed a worker (see test_bad_input): both URLs."""
    for url in (a2a_url(lockable), lockable.access_url):
        for body in (b"[" * 65_000, b'{"jsonrpc":"2.0","method":"x","a":' + b"[" * 60_000):
            response = httpx.post(url, content=body, headers={"content-type": "application/json"})
            assert response.status_code in (200, 400), response.text
    assert lockable.server.process is not None
    assert lockable.server.process.poll() is None, "the server died"


def test_oversized_body_is_invalid_request_with_null_id(lockable: Seller) -> None:
    """Unread by the framework: HTTP 413, the body still JSON-RPC (-32600, id null)."""
    envelope = b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"' + b"x" * 70_000
    response = httpx.post(a2a_url(lockable), content=envelope + b'"}}')
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/json")
    rpc_error(dict(response.json()), -32600, None)


def test_envelopes_at_the_card_url(lockable: Seller) -> None:
    """``jsonrpc: 2.0`` plus a method is JSON-RPC there; anything else stays x402."""
    url = lockable.access_url
    sniffed = post_raw(url, b'{"jsonrpc":"2.0","method":"tasks/get","id":{}}')
    rpc_error(sniffed, -32600, None)
    rpc_error(post_raw(url, b'{"jsonrpc":"2.0","method":"nope/nope","id":3}'), -32601, 3)
    # not an envelope: the x402 flow answers as before
    assert (
        httpx.post(url, content=b"{nope", headers={"content-type": "application/json"}).json()[
            "code"
        ]
        == "INVALID_REQUEST"
    )
    discovery = httpx.post(url, json={"jsonrpc": "1.0", "method": "tasks/get"})
    assert discovery.status_code == 402
    assert "accepts" in discovery.json()


# ------------------------------------------------------------------ JSON-RPC 2.0 section 5.1


MISSING_ID: list[tuple[str, dict[str, Any], int]] = [
    ("jsonrpc not 2.0", {"jsonrpc": "aaa", "method": "message/send", "params": {}}, -32600),
    ("no method", {"params": {}}, -32600),
    ("unknown method", {"method": "message/ssend", "params": {}}, -32601),
    ("params that do not validate", {"method": "message/send", "params": {"": "x"}}, -32602),
    ("a valid call", {"method": "tasks/get", "params": {"id": str(uuid.uuid4())}}, -32600),
]


@pytest.mark.parametrize(("case", "fields", "code"), MISSING_ID, ids=[m[0] for m in MISSING_ID])
def test_json_rpc_2_0_s5_1_a_request_without_id_is_read_to_the_end(
    lockable: Seller, case: str, fields: dict[str, Any], code: int
) -> None:
    """Method, then params, are judged first (-32601, -32602); only then the missing id."""
    body = json.dumps({"jsonrpc": "2.0", **fields}).encode()  # (a "jsonrpc" in fields wins)
    error = rpc_error(post_raw(a2a_url(lockable), body), code, None)
    if case == "a valid call":
        assert '"id"' in error["data"]["detail"]


def test_json_rpc_2_0_s4_the_same_id_twice_gets_two_answers(lockable: Seller) -> None:
    url = a2a_url(lockable)
    first = task_of(send(url, message(text("plans?")), request_id="same"))
    second = task_of(send(url, message(text("plans?")), request_id="same"))
    assert first["id"] != second["id"]


# ------------------------------------------------------------------ -32601 / -32003 / -32007


@pytest.mark.parametrize("method", ["tasks/list", "foo/bar", "message/SEND", "rpc.discover"])
def test_unknown_methods(lockable: Seller, method: str) -> None:
    rpc_error(call(a2a_url(lockable), method, {}), -32601, "req-1")


@pytest.mark.parametrize(
    "method",
    [
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
        "tasks/pushNotificationConfig/delete",
    ],
)
def test_a2a_0_3_s8_2_push_notifications_are_not_supported(lockable: Seller, method: str) -> None:
    error = rpc_error(call(a2a_url(lockable), method, {"id": "x"}), -32003, "req-1")
    assert error["message"] == "Push Notification is not supported"
    assert "capabilities.pushNotifications" in error["data"]["detail"]


def test_push_config_on_message_send_is_unsupported(lockable: Seller) -> None:
    params = {
        "message": message(data({"planId": "hourly"})),
        "configuration": {"pushNotificationConfig": {"url": "https://example.com/hook"}},
    }
    rpc_error(call(a2a_url(lockable), "message/send", params), -32003, "req-1")


def test_extended_card_is_not_configured(lockable: Seller) -> None:
    rpc_error(call(a2a_url(lockable), "agent/getAuthenticatedExtendedCard", {}), -32007, "req-1")


# ------------------------------------------------------------------ -32005


def test_file_parts_and_unreadable_output_modes(lockable: Seller) -> None:
    url = a2a_url(lockable)
    file_part = {"kind": "file", "file": {"uri": "https://example.com/x.png"}}
    rpc_error(send(url, message(file_part)), -32005, "req-1")
    params = {
        "message": message(data({"planId": "hourly"})),
        "configuration": {"acceptedOutputModes": ["image/png"]},
    }
    rpc_error(call(url, "message/send", params), -32005, "req-1")
    params["configuration"] = {"acceptedOutputModes": ["text/plain", "application/json"]}
    assert task_of(call(url, "message/send", params))["status"]["state"] == "input-required"


# ------------------------------------------------------------------ -32602


def _invalid_params(url: str, params: Any) -> dict[str, Any]:
    return rpc_error(call(url, "message/send", params), -32602, "req-1")


def test_invalid_message_params(lockable: Seller) -> None:
    url = a2a_url(lockable)
    rpc_error(
        post_raw(url, b'{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":[1]}'), -32602, 9
    )
    _invalid_params(url, {})
    _invalid_params(url, {"message": {"role": "user", "parts": []}})  # no messageId
    _invalid_params(url, {"message": {**message(), "parts": [{"kind": "video"}]}})
    _invalid_params(url, {"message": {**message(), "role": "system"}})
    rpc_error(call(url, "tasks/get", {}), -32602, "req-1")
    rpc_error(call(url, "tasks/get", {"id": "x", "historyLength": -1}), -32602, "req-1")
    rpc_error(call(url, "tasks/cancel", {"id": 5}), -32602, "req-1")


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"planId": "yearly"}, "TIER_NOT_FOUND"),
        ({"planId": 7}, "INVALID_REQUEST"),
        ({"planId": "hourly", "requestId": "r-1"}, "INVALID_REQUEST"),
        ({"planId": "hourly", "resourceId": "a b"}, "INVALID_REQUEST"),
    ],
)
def test_bad_purchase_fields_are_the_http_problems(
    lockable: Seller, fields: dict[str, Any], code: str
) -> None:
    error = _invalid_params(a2a_url(lockable), {"message": message(data(fields))})
    problem = error["data"]
    assert problem["code"] == code
    assert problem["status"] in (400, 415)
    assert problem["detail"]


def test_request_id_reused_for_another_plan(lockable: Seller, request_id: str) -> None:
    url = a2a_url(lockable)
    open_task(url, "hourly", requestId=request_id)
    error = _invalid_params(
        url, {"message": message(data({"planId": "daily", "requestId": request_id}))}
    )
    assert error["data"]["code"] == "REQUEST_ID_CONFLICT"


def test_messages_that_do_not_fit_the_task(lockable: Seller) -> None:
    url = a2a_url(lockable)
    task = open_task(url)
    submitted = {STATUS: "payment-submitted"}
    # a payment status without a task; a payment without its payload; a payload that is no object
    _invalid_params(url, {"message": message(metadata={**submitted, PAYLOAD: {}})})
    _invalid_params(url, {"message": message(task_id=task["id"], metadata=submitted)})
    error = _invalid_params(
        url, {"message": message(task_id=task["id"], metadata={**submitted, PAYLOAD: "eyJ4NDAy"})}
    )
    assert error["data"]["code"] == "INVALID_REQUEST"
    # a status a client does not send, another task's context
    _invalid_params(
        url, {"message": message(task_id=task["id"], metadata={STATUS: "payment-completed"})}
    )
    _invalid_params(url, {"message": message(task_id=task["id"], context_id=str(uuid.uuid4()))})
    assert task_of(call(url, "tasks/get", {"id": task["id"]})) == task  # nothing changed


def test_a2a_0_3_s7_1_a_message_without_payment_on_an_open_task_is_taken(lockable: Seller) -> None:
    """Conversation on a task waiting for its payment: kept in history, the task unchanged."""
    url = a2a_url(lockable)
    task = open_task(url)
    chat = message(text("and now?"), task_id=task["id"])
    answer = task_of(send(url, chat))
    assert answer["status"] == task["status"]
    assert answer["history"][-1]["messageId"] == chat["messageId"]


def test_a_payment_on_a_canceled_task(lockable: Seller, buyer: LocalAccount) -> None:
    """A2A 1.0 3.1.1: a task in a final state takes no more messages (UnsupportedOperation)."""
    url = a2a_url(lockable)
    task = open_task(url)
    canceled = task_of(call(url, "tasks/cancel", {"id": task["id"]}))
    assert canceled["status"]["state"] == "canceled"
    error = rpc_error(pay(url, task, payment_for(lockable, buyer, task)), -32004, "req-1")
    assert "canceled" in error["data"]["detail"]
    rpc_error(send(url, message(text("hello?"), task_id=task["id"])), -32004, "req-1")


# ------------------------------------------------------------------ -32603


def test_store_unavailable_is_internal_error_and_nothing_changes(lockable: Seller) -> None:
    url = a2a_url(lockable)
    waiting = open_task(url, "daily")
    block = lockable.chain.rpc.block_number()
    with locked(lockable.server.directory / "x402srv.db"):
        error = rpc_error(send(url, message(data({"planId": "daily"}))), -32603, "req-1")
        # reading a task still works: asking the pipeline again fails, the stored task stands
        assert task_of(call(url, "tasks/get", {"id": waiting["id"]})) == waiting
    assert error["data"]["code"] == "STORE_UNAVAILABLE"
    assert error["data"]["retryAfter"] >= 1
    assert "sqlite" not in str(error).lower()
    assert lockable.chain.rpc.block_number() == block
    assert open_task(url, "daily")["status"]["state"] == "input-required"  # and it recovers


# ------------------------------------------------------------------ -32001 / -32002


@pytest.mark.parametrize("task_id", ["6f1c2a8e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", "nope", "x" * 500, ""])
def test_unknown_tasks(lockable: Seller, task_id: str) -> None:
    url = a2a_url(lockable)
    rpc_error(call(url, "tasks/get", {"id": task_id}), -32001, "req-1")
    rpc_error(call(url, "tasks/cancel", {"id": task_id}), -32001, "req-1")
    if task_id and len(task_id) <= 128:
        rpc_error(send(url, message(text("hi"), task_id=task_id)), -32001, "req-1")


def test_tasks_that_cannot_be_canceled(lockable: Seller, buyer: LocalAccount) -> None:
    url = a2a_url(lockable)
    task = open_task(url)
    rejected = task_of(
        send(url, message(task_id=task["id"], metadata={STATUS: "payment-rejected"}))
    )
    assert rejected["status"]["state"] == "canceled"
    assert rejected["status"]["message"]["metadata"][STATUS] == "payment-rejected"
    error = rpc_error(call(url, "tasks/cancel", {"id": task["id"]}), -32002, "req-1")
    assert error["data"]["detail"] == "the task is canceled"

    paid_task = open_task(url)
    paid = task_of(pay(url, paid_task, payment_for(lockable, buyer, paid_task)))
    assert paid["status"]["state"] == "completed"
    rpc_error(call(url, "tasks/cancel", {"id": paid_task["id"]}), -32002, "req-1")
    rejected_late = message(task_id=paid_task["id"], metadata={STATUS: "payment-rejected"})
    rpc_error(send(url, rejected_late), -32002, "req-1")
    assert task_of(call(url, "tasks/get", {"id": paid_task["id"]})) == paid


# ------------------------------------------------------------------ extension header


def test_the_x402_extension_header_is_echoed_when_activated(lockable: Seller) -> None:
    url = a2a_url(lockable)
    envelope = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": message(text("plans?"))},
    }
    asked = httpx.post(
        url, json=envelope, headers={"X-A2A-Extensions": f"urn:other, {X402_EXTENSION}"}
    )
    assert asked.headers["x-a2a-extensions"] == X402_EXTENSION
    newer = httpx.post(url, json=envelope, headers={"A2A-Extensions": X402_EXTENSION})
    assert newer.headers["a2a-extensions"] == X402_EXTENSION
    other = httpx.post(url, json=envelope, headers={"X-A2A-Extensions": "urn:other"})
    assert "x-a2a-extensions" not in other.headers
    plain = httpx.post(url, json=envelope)
    assert "x-a2a-extensions" not in plain.headers
    assert plain.json()["result"]["kind"] == "task"


def test_get_on_the_a2a_path_is_still_a_problem(lockable: Seller) -> None:
    response = httpx.get(a2a_url(lockable))
    assert response.status_code == 405
    assert response.json()["code"] == "METHOD_NOT_ALLOWED"
