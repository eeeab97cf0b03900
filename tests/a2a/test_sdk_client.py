"""The official ``a2a-sdk`` client buys a plan, in native A2A 1.0 and in 0.3 mode.

Nothing here speaks JSON-RPC by hand. The buyer opens a task naming no plan
(the catalog, input-required), names a plan on that same task, signs the
task's ``x402.payment.required`` with the official x402 client and sends the
PaymentPayload on it. The token it receives opens the seller's guarded route.
Runs on a real server on anvil, once per settlement strategy and per mode; the
recorder proves each mode spoke its own version on the wire.
"""

from __future__ import annotations

import uuid

import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from eth_account.signers.local import LocalAccount
from google.protobuf.json_format import MessageToDict
from x402.schemas import PaymentRequired

from tests.support.a2a_jsonrpc import ERROR, PAYLOAD, RECEIPTS, REQUIRED, STATUS, X402_EXTENSION
from tests.support.a2a_sdk import (
    METHODS,
    X402,
    sdk_client,
    send,
    status_metadata,
    user_message,
)
from tests.support.purchase import HOURLY, check_grant, seller_api
from tests.support.seller import Seller
from x402srv.testing.buyers import official_client

MODES = ["1.0", "0.3"]


@pytest.mark.parametrize("version", MODES)
async def test_sdk_client_discovers_and_buys_a_plan(
    card_seller: Seller, buyer: LocalAccount, version: str
) -> None:
    seller = card_seller
    async with sdk_client(seller, version) as (client, recorder):
        catalog = (await send(client, user_message(text="What plans do you offer?"))).task
        assert catalog.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        plans = MessageToDict(catalog.status.message.parts[1].data)["plans"]
        assert [plan["planId"] for plan in plans] == ["hourly", "daily"]

        chosen = await send(
            client, user_message(text="This one", data={"planId": "hourly"}, task_id=catalog.id)
        )
        task = chosen.task
        assert task.id == catalog.id
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        metadata = status_metadata(task)
        assert metadata[STATUS] == "payment-required"
        required = PaymentRequired.model_validate(metadata[REQUIRED])
        assert required.accepts[0].amount == str(HOURLY)

        payload = await official_client(buyer).create_payment_payload(required)
        before = seller.balance()
        paid = await send(
            client,
            user_message(
                text="Here is the payment authorization.",
                task_id=task.id,
                metadata={
                    STATUS: "payment-submitted",
                    PAYLOAD: payload.model_dump(mode="json", by_alias=True, exclude_none=True),
                },
            ),
        )
        done = paid.task
        assert done.id == task.id
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        metadata = status_metadata(done)
        assert metadata[STATUS] == "payment-completed"
        grant = MessageToDict(done.artifacts[0].parts[0].data)
        check_grant(grant, seller)
        assert metadata[RECEIPTS][0]["transaction"] == grant["txHash"]
        assert seller.balance() - before == HOURLY

        fetched = await client.get_task(GetTaskRequest(id=task.id), context=X402)
        assert fetched == done

        # every call went to the card's url in this mode's version; the extension echoed
        names = METHODS[version]
        assert recorder.methods() == [names["send"]] * 3 + [names["get"]]
        extensions = "a2a-extensions" if version == "1.0" else "x-a2a-extensions"
        for request, response in recorder.calls():
            assert str(request.url) == seller.access_url
            assert request.headers["a2a-version"] == version
            assert response.status_code == 200
            assert response.headers[extensions] == X402_EXTENSION

    api = seller_api(seller)
    _, answer = await api.asgi_client.get(
        "/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert answer.status == 200
    assert answer.json["sub"] == grant["requestId"]


@pytest.mark.parametrize("version", MODES)
async def test_sdk_client_sees_the_a2a_errors(
    card_seller: Seller, buyer: LocalAccount, version: str
) -> None:
    """The SDK maps our error codes to its own exceptions: the shapes are the spec's."""
    async with sdk_client(card_seller, version) as (client, _):
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())), context=X402)
        opened = await send(client, user_message(text="Buy the hourly plan"))
        task = opened.task
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id), context=X402)
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id), context=X402)
        with pytest.raises(UnsupportedOperationError):
            await send(client, user_message(text="more?", task_id=task.id))

        # a payment that fails verification: payment-failed with the extension's code
        other = (await send(client, user_message(text="Buy the daily plan"))).task
        payload = await official_client(buyer).create_payment_payload(
            PaymentRequired.model_validate(status_metadata(opened.task)[REQUIRED])
        )  # signed for the hourly plan's challenge, sent on the daily task
        dumped = payload.model_dump(mode="json", by_alias=True, exclude_none=True)
        del dumped["accepted"]["extra"]["challengeId"], dumped["accepted"]["extra"]["requestId"]
        failed = await send(
            client,
            user_message(
                text="pay",
                task_id=other.id,
                metadata={STATUS: "payment-submitted", PAYLOAD: dumped},
            ),
        )
        assert failed.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert status_metadata(failed.task)[ERROR] == "INVALID_AMOUNT"
