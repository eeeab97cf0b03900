"""The official ``a2a-sdk`` client buys a plan: card discovery, JSON-RPC 0.3, x402 extension.

Nothing here speaks JSON-RPC by hand. ``create_client`` resolves the agent card
from ``/.well-known/agent-card.json``, reads ``protocolVersion: 0.3.0`` and
``preferredTransport: JSONRPC`` and picks its v0.3 JSON-RPC transport for the
card's url; the buyer asks for the catalog, opens a task for a plan, signs the
task's ``x402.payment.required`` with the official x402 client, and sends the
PaymentPayload on the task. The token it receives opens the seller's guarded
route. Runs on a real server on anvil, once per settlement strategy.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientCallContext, ClientConfig, create_client
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError, TaskNotFoundError
from eth_account.signers.local import LocalAccount
from google.protobuf.json_format import MessageToDict, ParseDict
from x402.schemas import PaymentRequired

from tests.a2a.support import ERROR, PAYLOAD, RECEIPTS, REQUIRED, STATUS, X402_EXTENSION
from tests.e2e.test_purchase import HOURLY, check_grant, seller_api
from tests.helpers import Seller
from x402srv.testing.buyers import official_client


class Recorder(httpx.AsyncBaseTransport):
    """Keeps every request and response the SDK client exchanged (for the assertions)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[tuple[httpx.Request, httpx.Response]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        response = await self._inner.handle_async_request(request)
        await response.aread()
        self.exchanges.append((request, response))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def sdk_client(seller: Seller) -> AsyncIterator[tuple[Client, Recorder]]:
    recorder = Recorder()
    async with httpx.AsyncClient(transport=recorder, timeout=60) as http:
        client = await create_client(seller.server.url, ClientConfig(httpx_client=http))
        try:
            yield client, recorder
        finally:
            await client.close()


X402 = ClientCallContext(
    service_parameters=ServiceParametersFactory.create([with_a2a_extensions([X402_EXTENSION])])
)


def user_message(
    *, text: str, data: dict[str, Any] | None = None, task_id: str = "", metadata: Any = None
) -> Message:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=task_id)
    message.parts.append(Part(text=text))
    if data is not None:
        message.parts.append(ParseDict({"data": data}, Part()))
    if metadata is not None:
        ParseDict(metadata, message.metadata)
    return message


async def send(client: Client, message: Message) -> StreamResponse:
    [answer] = [
        a async for a in client.send_message(SendMessageRequest(message=message), context=X402)
    ]
    return answer


def status_metadata(task: Task) -> dict[str, Any]:
    return dict(MessageToDict(task.status.message.metadata))


async def test_sdk_client_discovers_and_buys_a_plan(
    card_seller: Seller, buyer: LocalAccount
) -> None:
    seller = card_seller
    async with sdk_client(seller) as (client, recorder):
        catalog = await send(client, user_message(text="What plans do you offer?"))
        assert catalog.HasField("message")
        plans = MessageToDict(catalog.message.parts[1].data)["plans"]
        assert [plan["planId"] for plan in plans] == ["hourly", "daily"]

        opened = await send(client, user_message(text="Buy a plan", data={"planId": "hourly"}))
        task = opened.task
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

        # every JSON-RPC call went to the card's url as v0.3, and the extension was echoed
        posts = [(q, r) for q, r in recorder.exchanges if q.method == "POST"]
        assert len(posts) == 4
        for request, response in posts:
            assert str(request.url) == seller.access_url
            assert request.headers["a2a-version"] == "0.3"
            assert response.status_code == 200
            assert response.headers["x-a2a-extensions"] == X402_EXTENSION

    api = seller_api(seller)
    _, answer = await api.asgi_client.get(
        "/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert answer.status == 200
    assert answer.json["sub"] == grant["requestId"]


async def test_sdk_client_sees_the_a2a_errors(card_seller: Seller, buyer: LocalAccount) -> None:
    """The SDK maps our error codes to its own exceptions: the shapes are the spec's."""
    async with sdk_client(card_seller) as (client, _):
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=str(uuid.uuid4())), context=X402)
        opened = await send(client, user_message(text="Buy the hourly plan"))
        task = opened.task
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id), context=X402)
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id), context=X402)
        with pytest.raises(InvalidParamsError):
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
