"""Streaming (A2A 0.3 7.2 message/stream, 7.9 tasks/resubscribe; 1.0 3.1.2, 3.1.6).

A buyer paying through a stream sees the task go payment-submitted -> working
(settling, then the transaction hash once broadcast) -> the AccessGrant ->
completed, with the ``a2a-sdk`` streaming client in 1.0 and in 0.3 mode, on a
real server on anvil, once per settlement strategy. The steps are written on the
task as the pipeline reports them, so the sequence is the same however fast the
chain is.

Then what a stream must not lose: a buyer who hangs up while the transaction
waits in the mempool finds the grant on tasks/get, and a resubscription on
another server process (same store) follows the settlement to its end. The
chain is held (anvil's automine off) until the test has seen what it waits for,
so nothing here depends on timing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from a2a.compat.v0_3 import types as v03
from a2a.types import a2a_pb2
from a2a.types.a2a_pb2 import StreamResponse, TaskState
from eth_account.signers.local import LocalAccount
from google.protobuf.json_format import MessageToDict, ParseDict
from x402.schemas import PaymentRequired

from tests.support.a2a_jsonrpc import (
    PAYLOAD,
    REQUIRED,
    STATUS,
    V10,
    a2a_url,
    call,
    error_data,
    get,
    grant_of,
    message,
    open_task,
    payment_for,
    required_of,
    sse,
    status_metadata,
    task_of,
    text,
)
from tests.support.a2a_sdk import METHODS, events, sdk_client, user_message
from tests.support.purchase import HOURLY, check_grant
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import official_client

MODES = ["1.0", "0.3"]


def _step(event: StreamResponse) -> tuple[str, str, str | None, bool]:
    """(kind, task state, x402.payment.status, has a txHash) of one stream event."""
    kind = event.WhichOneof("payload")
    if kind == "artifact_update":
        return kind, "", event.artifact_update.artifact.name, False
    status = event.task.status if kind == "task" else event.status_update.status
    metadata = MessageToDict(status.message.metadata)
    return kind, TaskState.Name(status.state), metadata.get(STATUS), "x402srv.txHash" in metadata


@pytest.mark.parametrize("version", MODES)
async def test_a2a_1_0_s3_1_2_a_streamed_purchase_shows_the_settlement(
    card_seller: Seller, buyer: LocalAccount, version: str
) -> None:
    seller = card_seller
    async with sdk_client(seller, version, streaming=True) as (client, recorder):
        [opened] = await events(client, user_message(text="Buy the hourly plan"))
        task = opened.task
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # the stream ends here
        required = PaymentRequired.model_validate(
            MessageToDict(task.status.message.metadata)[REQUIRED]
        )
        payload = await official_client(buyer).create_payment_payload(required)
        before = seller.balance()
        paid = await events(
            client,
            user_message(
                text="Here is the payment.",
                task_id=task.id,
                metadata={
                    STATUS: "payment-submitted",
                    PAYLOAD: payload.model_dump(mode="json", by_alias=True, exclude_none=True),
                },
            ),
        )
        steps = [_step(event) for event in paid]
        assert steps == [
            ("task", "TASK_STATE_WORKING", "payment-submitted", False),
            ("status_update", "TASK_STATE_WORKING", "payment-verified", False),
            ("status_update", "TASK_STATE_WORKING", "payment-verified", True),
            ("artifact_update", "", "AccessGrant", False),
            ("status_update", "TASK_STATE_COMPLETED", "payment-completed", False),
        ]
        broadcast = MessageToDict(paid[2].status_update.status.message.metadata)["x402srv.txHash"]
        grant = MessageToDict(paid[3].artifact_update.artifact.parts[0].data)
        check_grant(grant, seller)
        assert grant["txHash"] == broadcast
        for event in paid[1:]:
            kind = event.WhichOneof("payload")
            assert getattr(event, str(kind)).task_id == task.id
        assert seller.balance() - before == HOURLY
        assert recorder.methods() == [METHODS[version]["stream"]] * 2
        for request, response in recorder.calls():
            assert request.headers["a2a-version"] == version
            assert response.headers["content-type"].startswith("text/event-stream")

    # the stream's end is the stored task: history holds every status it went through
    stored = task_of(get(a2a_url(seller), task.id))
    assert grant_of(stored) == grant
    statuses = [m["metadata"].get(STATUS) for m in stored["history"] if m["role"] == "agent"]
    assert statuses == ["payment-required", "payment-verified", "payment-verified"]


# ------------------------------------------------------------------ raw SSE, both versions


def _v03_events(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for document in documents:
        v03.SendStreamingMessageResponse.model_validate(document)
    return [document["result"] for document in documents]


def _v10_events(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results = [document["result"] for document in documents]
    for result in results:
        ParseDict(result, a2a_pb2.StreamResponse())
    return results


def test_a2a_0_3_s7_2_message_stream_opens_a_task_and_ends_at_input_required(
    seller: Seller,
) -> None:
    [task] = _v03_events(sse(a2a_url(seller), "message/stream", {"message": message()}))
    assert task["kind"] == "task"
    assert task["status"]["state"] == "input-required"
    assert task_of(get(a2a_url(seller), task["id"]))["status"] == task["status"]


def test_a2a_1_0_s3_1_2_send_streaming_message_in_1_0(seller: Seller) -> None:
    params = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    [event] = _v10_events(sse(a2a_url(seller), "SendStreamingMessage", params, **V10))
    assert event["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("message/stream", {"invalid": "params"}, -32602),
        ("tasks/resubscribe", {"id": "non-existent-task-id"}, -32001),
        ("tasks/resubscribe", {}, -32602),
    ],
)
def test_a2a_0_3_s7_9_stream_errors_arrive_as_the_stream(
    seller: Seller, method: str, params: dict[str, Any], code: int
) -> None:
    """A streaming method that fails at once still answers text/event-stream: one error."""
    [document] = sse(a2a_url(seller), method, params)
    v03.JSONRPCErrorResponse.model_validate(document)
    assert document["id"] == "s-1"
    assert document["error"]["code"] == code


def test_a2a_0_3_s7_9_resubscribe_to_an_open_task(seller: Seller) -> None:
    """The current Task first; a task waiting for its payment ends the stream there."""
    url = a2a_url(seller)
    task = open_task(url)
    [again] = _v03_events(sse(url, "tasks/resubscribe", {"id": task["id"]}))
    assert again == task


def test_a2a_1_0_s3_1_6_subscribing_to_a_final_task_is_unsupported(seller: Seller) -> None:
    url = a2a_url(seller)
    task = open_task(url)
    call(url, "tasks/cancel", {"id": task["id"]})
    for method, headers in (("tasks/resubscribe", {}), ("SubscribeToTask", V10)):
        [document] = sse(url, method, {"id": task["id"]}, **headers)
        assert document["error"]["code"] == -32004
        assert "canceled" in error_data(document["error"])["detail"]


# ------------------------------------------------------------------ nothing lost


@contextmanager
def held_chain(devchain: Devchain) -> Iterator[None]:
    """Transactions wait in the mempool until ``devchain.rpc.mine()``."""
    devchain.rpc.call("evm_setAutomine", [False])
    try:
        yield
    finally:
        devchain.rpc.call("evm_setAutomine", [True])


def _payment_stream(url: str, task: dict[str, Any], payment: dict[str, Any]) -> dict[str, Any]:
    metadata = {STATUS: "payment-submitted", PAYLOAD: payment}
    msg = message(text("Here is the payment."), task_id=task["id"], metadata=metadata)
    return {"jsonrpc": "2.0", "id": "pay", "method": "message/stream", "params": {"message": msg}}


def _events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])["result"]


def _broadcast(event: dict[str, Any]) -> str | None:
    """The transaction hash a stream event announces, if any."""
    metadata = event.get("status", {}).get("message", {}).get("metadata", {})
    tx_hash: str | None = metadata.get("x402srv.txHash")
    return tx_hash


def _mine_once_sent(devchain: Devchain, tx_hash: str) -> None:
    """Mine the block holding ``tx_hash``; the hash is announced just before it is sent."""
    deadline = time.monotonic() + 30
    while devchain.rpc.call("eth_getTransactionByHash", [tx_hash]) is None:
        assert time.monotonic() < deadline, "the transaction never reached the node"
        time.sleep(0.02)
    devchain.rpc.mine()


def _until_completed(url: str, task_id: str) -> dict[str, Any]:
    """tasks/get until the task is final (each call asks the chain again)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        polled = task_of(get(url, task_id))
        if polled["status"]["state"] != "working":
            return polled
        time.sleep(0.1)
    raise AssertionError("the task stayed working")


@pytest.fixture(scope="module")
def gas_seller(start_seller: Callable[..., Seller]) -> Seller:
    """A seller on the gas wallet for the tests that hold the chain (each counts its own)."""
    return start_seller("gas-wallet")


def test_a_client_that_hangs_up_mid_settlement_finds_the_grant(
    gas_seller: Seller, devchain: Devchain, buyer: LocalAccount
) -> None:
    seller = gas_seller
    balance, first_block = seller.balance(), devchain.rpc.block_number() + 1
    url = a2a_url(seller)
    task = open_task(url)
    payment = payment_for(seller, buyer, task)
    tx_hash = None
    with held_chain(devchain):
        with httpx.stream("POST", url, json=_payment_stream(url, task, payment), timeout=60) as r:
            for event in _events(r):
                tx_hash = _broadcast(event)
                if tx_hash:
                    break  # the transaction is on its way to the mempool: hang up now
        assert tx_hash is not None
        waiting = task_of(get(url, task["id"]))
        assert waiting["status"]["state"] == "working"
        assert status_metadata(waiting)["x402srv.txHash"] == tx_hash
        _mine_once_sent(devchain, tx_hash)
    done = _until_completed(url, task["id"])
    assert done["status"]["state"] == "completed"
    assert grant_of(done)["txHash"] == tx_hash
    assert seller.balance() - balance == HOURLY
    assert len(seller.chain.transfer_logs(to=seller.wallet, from_block=first_block)) == 1
    logs = seller.server.logs()  # secrets never reach the logs
    assert payment["payload"]["signature"] not in logs
    assert grant_of(done)["accessToken"] not in logs


def test_a_resubscription_on_another_server_follows_the_settlement(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    buyer: LocalAccount,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Worker A settles; B (same store) streams the task from the store to its end."""
    shared = tmp_path_factory.mktemp("stream-store") / "x402srv.db"
    store = {"backend": "sqlite", "path": str(shared)}
    first = start_seller("gas-wallet", store=dict(store))
    second = start_seller("gas-wallet", store=dict(store))
    task = open_task(a2a_url(first))
    payment = payment_for(first, buyer, task)
    envelope = _payment_stream(a2a_url(first), task, payment)
    tx_hash = None
    with held_chain(devchain):
        with httpx.stream("POST", a2a_url(first), json=envelope, timeout=60) as paying:
            for event in _events(paying):
                tx_hash = _broadcast(event)
                if tx_hash:
                    break
        assert tx_hash is not None, "the paying stream never announced its transaction"
        resubscribe = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask"}
        resubscribe["params"] = {"id": task["id"]}
        with httpx.stream(
            "POST", a2a_url(second), json=resubscribe, headers=V10, timeout=60
        ) as followed:
            stream = _events(followed)
            current = next(stream)["task"]
            assert current["status"]["state"] == "TASK_STATE_WORKING"
            assert current["status"]["message"]["metadata"]["x402srv.txHash"] == tx_hash
            _mine_once_sent(devchain, tx_hash)
            rest = list(stream)
    for event in rest:
        ParseDict(event, a2a_pb2.StreamResponse())
    assert [next(iter(event)) for event in rest] == ["artifactUpdate", "statusUpdate"]
    assert rest[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    grant = rest[0]["artifactUpdate"]["artifact"]["parts"][0]["data"]
    assert grant == grant_of(task_of(get(a2a_url(second), task["id"])))
    assert first.balance() == HOURLY
    assert required_of(task)["accepts"][0]["payTo"] == first.wallet


@pytest.mark.parametrize(
    ("method", "configuration", "headers"),
    [
        ("SendMessage", {"returnImmediately": True}, V10),
        ("message/send", {"blocking": False}, {}),
    ],
)
def test_a2a_1_0_s3_2_2_return_immediately_answers_while_it_settles(
    gas_seller: Seller,
    devchain: Devchain,
    buyer: LocalAccount,
    method: str,
    configuration: dict[str, Any],
    headers: dict[str, str],
) -> None:
    """The answer comes once the settlement shows on the task; tasks/get then agrees."""
    seller = gas_seller
    balance = seller.balance()
    url = a2a_url(seller)
    task = open_task(url)
    params = _payment_stream(url, task, payment_for(seller, buyer, task))["params"]
    if method == "SendMessage":  # the same message in 1.0's words
        params["message"] = {
            **{k: v for k, v in params["message"].items() if k != "kind"},
            "role": "ROLE_USER",
            "parts": [{"text": "Here is the payment."}],
        }
    with held_chain(devchain):
        answer = call(url, method, {**params, "configuration": configuration}, headers=headers)
        shown = answer["result"].get("task", answer["result"])
        assert shown["status"]["state"] in ("working", "TASK_STATE_WORKING")
        waiting = task_of(get(url, task["id"]))
        assert waiting["status"]["state"] == "working"
        tx_hash = None
        deadline = time.monotonic() + 30
        while tx_hash is None:  # the hash is written on the task just before it is sent
            assert time.monotonic() < deadline
            tx_hash = status_metadata(task_of(get(url, task["id"]))).get("x402srv.txHash")
            time.sleep(0.02)
        _mine_once_sent(devchain, tx_hash)
    assert _until_completed(url, task["id"])["status"]["state"] == "completed"
    assert seller.balance() - balance == HOURLY
