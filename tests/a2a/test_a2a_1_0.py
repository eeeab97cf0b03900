"""A2A 1.0 on the same endpoint: version choice, a raw purchase, ListTasks, 1.0 error codes.

Every 1.0 Task is parsed with the SDK's protobuf types, unknown fields refused
(``support.v10_task``), so what we send is exactly ``a2a.proto``'s JSON. The
SDK client buying in native 1.0 mode is in ``test_sdk_client``.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from a2a.compat.v0_3.types import AgentCard as AgentCard03
from a2a.types import a2a_pb2
from eth_account.signers.local import LocalAccount
from google.protobuf.json_format import ParseDict

from tests.support.a2a_jsonrpc import (
    PAYLOAD,
    REQUIRED,
    STATUS,
    V10,
    a2a_url,
    call,
    error_of,
    message,
    result,
    task_of,
    v10_call,
    v10_message,
    v10_status_metadata,
    v10_task,
)
from tests.support.purchase import HOURLY, check_grant
from tests.support.seller import Seller
from x402srv.testing.buyers import signed_payment

# ------------------------------------------------------------------ 3.6 versioning


@pytest.mark.parametrize(
    ("header", "method", "params", "code"),
    [
        ("1.0", "message/send", {"message": {}}, -32601),  # 0.3 names are not 1.0 methods
        ("0.3", "SendMessage", {"message": {}}, -32601),  # and the other way round
        ("2.0", "SendMessage", {"message": {}}, -32009),
        ("1.0-beta", "GetTask", {"id": "x"}, -32009),
    ],
)
def test_a2a_1_0_s3_6_the_a2a_version_header_chooses(
    seller: Seller, header: str, method: str, params: dict[str, Any], code: int
) -> None:
    error = error_of(call(a2a_url(seller), method, params, headers={"A2A-Version": header}), code)
    if code == -32009:
        assert error["message"] == "Version not supported"


@pytest.mark.parametrize("header", [None, "1", "1.0", "1.0.0"])
def test_a2a_1_0_s3_6_1_0_requests_with_or_without_the_header(
    seller: Seller, header: str | None
) -> None:
    """Without the header a request is 0.3, but a method name only 1.0 has is read as 1.0."""
    headers = {} if header is None else {"A2A-Version": header}
    params = {"message": v10_message({"text": "hello"})}
    task = v10_task(call(a2a_url(seller), "SendMessage", params, headers=headers))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert task["history"][0]["role"] == "ROLE_USER"


@pytest.mark.parametrize("header", [None, "0.3", "0.3.0"])
def test_a2a_1_0_s3_6_a_missing_or_0_x_header_is_0_3(seller: Seller, header: str | None) -> None:
    headers = {} if header is None else {"A2A-Version": header}
    task = task_of(call(a2a_url(seller), "message/send", {"message": message()}, headers=headers))
    assert task["kind"] == "task"


# ------------------------------------------------------------------ 9.4 a purchase


@pytest.mark.parametrize("where", ["a2a-path", "card-url"])
def test_a2a_1_0_s9_4_a_purchase_in_1_0(seller: Seller, buyer: LocalAccount, where: str) -> None:
    url = a2a_url(seller) if where == "a2a-path" else seller.access_url
    catalog = v10_task(v10_call(url, "SendMessage", {"message": v10_message({"text": "plans?"})}))
    offer = catalog["status"]["message"]["parts"][1]["data"]
    assert [plan["planId"] for plan in offer["plans"]] == ["hourly", "daily"]

    chosen = v10_task(
        v10_call(
            url,
            "SendMessage",
            {"message": v10_message({"data": {"planId": "hourly"}}, taskId=catalog["id"])},
        )
    )
    assert chosen["id"] == catalog["id"]
    metadata = v10_status_metadata(chosen)
    assert metadata[STATUS] == "payment-required"
    payment = signed_payment(buyer, seller.chain.token, metadata[REQUIRED]["accepts"][0])
    before = seller.balance()
    paid = v10_task(
        v10_call(
            url,
            "SendMessage",
            {
                "message": v10_message(
                    {"text": "Here is the payment."},
                    taskId=catalog["id"],
                    metadata={STATUS: "payment-submitted", PAYLOAD: payment},
                )
            },
        )
    )
    assert paid["status"]["state"] == "TASK_STATE_COMPLETED"
    assert v10_status_metadata(paid)[STATUS] == "payment-completed"
    [artifact] = paid["artifacts"]
    grant = artifact["parts"][0]["data"]
    check_grant(grant, seller)
    assert seller.balance() - before == HOURLY

    fetched = v10_task(v10_call(url, "GetTask", {"id": paid["id"], "historyLength": 1}))
    assert fetched["artifacts"] == paid["artifacts"]
    assert len(fetched["history"]) == 1
    # the same task read in 0.3 says the same thing
    assert (
        call(url, "tasks/get", {"id": paid["id"]})["result"]["artifacts"][0]["parts"][0]["data"]
        == grant
    )


def test_a2a_1_0_s3_1_5_cancel_and_the_task_errors(seller: Seller) -> None:
    url = a2a_url(seller)
    task = v10_task(v10_call(url, "SendMessage", {"message": v10_message()}))
    canceled = v10_task(v10_call(url, "CancelTask", {"id": task["id"]}))
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    error_of(v10_call(url, "CancelTask", {"id": task["id"]}), -32002)
    error_of(v10_call(url, "GetTask", {"id": "unknown"}), -32001)
    again = {"message": v10_message({"text": "more?"}, taskId=task["id"])}
    error_of(v10_call(url, "SendMessage", again), -32004)  # 3.1.1: a final task takes none


@pytest.mark.parametrize(
    "params",
    [
        {"message": {"messageId": "m", "role": "ROLE_UNSPECIFIED", "parts": [{"text": "x"}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x", "data": {}}]}},
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{}]}},
        {"message": {"kind": "message"}},
    ],
    ids=["unknown role", "two contents in a part", "no content", "no fields"],
)
def test_a2a_1_0_s9_5_messages_that_do_not_validate(seller: Seller, params: Any) -> None:
    error_of(v10_call(a2a_url(seller), "SendMessage", params), -32602)


def test_a2a_1_0_s3_2_2_file_parts_are_not_read(seller: Seller) -> None:
    part = {"url": "https://example.com/x.txt", "filename": "x.txt", "mediaType": "text/plain"}
    error_of(v10_call(a2a_url(seller), "SendMessage", {"message": v10_message(part)}), -32005)


# ------------------------------------------------------------------ 3.1.4 ListTasks


def test_a2a_1_0_s3_1_4_list_tasks_lists_no_task_to_an_anonymous_caller(seller: Seller) -> None:
    """13.1: results are scoped to the caller; nobody is authenticated here, so none."""
    url = a2a_url(seller)
    v10_call(url, "SendMessage", {"message": v10_message()})
    for params in ({}, {"contextId": "ctx", "status": "TASK_STATE_INPUT_REQUIRED"}):
        listing = v10_call(url, "ListTasks", params)["result"]
        assert listing == {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}


@pytest.mark.parametrize(
    "params",
    [
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageSize": -1},
        {"pageToken": "invalid-token-xyz"},
        {"status": "INVALID_STATUS"},
        {"historyLength": -1},
        {"statusTimestampAfter": "-1"},
    ],
)
def test_a2a_1_0_s3_1_4_list_tasks_checks_its_params(
    seller: Seller, params: dict[str, Any]
) -> None:
    error_of(v10_call(a2a_url(seller), "ListTasks", params), -32602)


def test_list_tasks_is_not_a_0_3_method(seller: Seller) -> None:
    error_of(call(a2a_url(seller), "tasks/list", {}), -32601)


# ------------------------------------------------------------------ 3.3.4 capabilities


@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ],
)
def test_a2a_1_0_s3_3_4_push_notifications_are_not_supported(seller: Seller, method: str) -> None:
    error_of(v10_call(a2a_url(seller), method, {"taskId": "x"}), -32003)


def test_a2a_1_0_s3_3_4_no_extended_card(seller: Seller) -> None:
    error = error_of(call(a2a_url(seller), "GetExtendedAgentCard", {}, headers=V10), -32004)
    assert "extendedAgentCard" in error["data"][0]["metadata"]["detail"]


# ------------------------------------------------------------------ the A2A kit's 1.0-dev findings


def test_a2a_1_0_agent_card_parses_as_a_1_0_card_with_no_unknown_field(seller: Seller) -> None:
    """The kit's CARD-STRUCT-001: the 1.0 schema allows no 0.3 field (url, protocolVersion ...)."""
    response = httpx.get(f"{seller.server.url}/.well-known/agent-card.json", headers=V10)
    card = response.json()
    ParseDict(card, a2a_pb2.AgentCard())  # unknown fields refused
    assert not {"url", "preferredTransport", "additionalInterfaces", "protocolVersion"} & set(card)
    assert "stateTransitionHistory" not in card["capabilities"]
    assert response.headers["vary"] == "A2A-Version"
    assert response.headers["etag"] and response.headers["last-modified"]
    again = httpx.get(response.url, headers={**V10, "If-None-Match": response.headers["etag"]})
    assert again.status_code == 304


@pytest.mark.parametrize(
    ("path", "header", "version"),
    [
        ("agent-card.json", None, "0.3"),  # a 0.3 client's resolver reads it with no header
        ("agent-card.json", "1.0", "1.0"),
        ("agent-card.json", "0.3", "0.3"),
        ("agent.json", None, "0.3"),
        ("agent.json", "1.0", "1.0"),
        ("agent-card.json", "7.1", "0.3"),  # a version we do not serve: the 0.3 card
    ],
)
def test_a2a_0_3_clients_get_a_0_3_card_by_path_or_header(
    seller: Seller, path: str, header: str | None, version: str
) -> None:
    headers = {} if header is None else {"A2A-Version": header}
    card = httpx.get(f"{seller.server.url}/.well-known/{path}", headers=headers).json()
    assert ("protocolVersion" in card) is (version == "0.3")
    if version == "0.3":
        assert AgentCard03.model_validate(card).protocol_version == "0.3.0"


@pytest.mark.parametrize("code", [-32001, -32004, -32005])
def test_a2a_1_0_s9_5_a2a_errors_carry_error_info_in_a_data_array(
    seller: Seller, code: int
) -> None:
    """The kit's JSONRPC-ERR-003: data is a list of ProtoJSON Any, ErrorInfo for A2A errors."""
    url = a2a_url(seller)
    calls = {
        -32001: ("GetTask", {"id": "unknown"}),
        -32004: ("GetExtendedAgentCard", {}),
        -32005: ("SendMessage", {"message": v10_message({"raw": "dGNr", "mediaType": "x/y"})}),
    }
    method, params = calls[code]
    (info,) = error_of(v10_call(url, method, params), code)["data"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    assert (
        info["reason"]
        == {
            -32001: "TASK_NOT_FOUND",
            -32004: "UNSUPPORTED_OPERATION",
            -32005: "CONTENT_TYPE_NOT_SUPPORTED",
        }[code]
    )
    assert all(isinstance(value, str) for value in info["metadata"].values())


def test_a2a_1_0_s9_5_standard_errors_carry_a_struct_and_0_3_keeps_its_object(
    seller: Seller,
) -> None:
    url = a2a_url(seller)
    (detail,) = error_of(v10_call(url, "SendMessage", {"message": {"kind": "x"}}), -32602)["data"]
    assert detail["@type"] == "type.googleapis.com/google.protobuf.Struct"
    assert isinstance(detail["value"], dict)
    garbled = httpx.post(url, content=b"{", headers=V10).json()
    assert garbled["error"]["code"] == -32700 and "data" not in garbled["error"]
    assert isinstance(error_of(call(url, "tasks/get", {"id": "unknown"}), -32001)["data"], dict)


def test_a2a_1_0_s3_1_6_subscribe_follows_the_task_to_its_terminal_state(seller: Seller) -> None:
    """The kit's STREAM-SUB-002: a SubscribeToTask stream closes with the terminal state.

    The subscription starts on a task waiting for a plan (input-required, where a
    0.3 resubscribe ends) and stays open until the task is canceled from another call.
    """
    url = a2a_url(seller)
    task = v10_task(v10_call(url, "SendMessage", {"message": v10_message()}))
    params = {"id": task["id"]}
    envelope = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": params}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", url, json=envelope, headers=V10, timeout=60) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(result(json.loads(line[6:])))
            if len(events) == 1:  # subscribed: now the task ends elsewhere
                v10_call(url, "CancelTask", {"id": task["id"]})
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
    for event in events:
        ParseDict(event, a2a_pb2.StreamResponse())
