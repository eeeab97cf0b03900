"""The official ``a2a-sdk`` client against a real seller, in native 1.0 mode or in 0.3 mode.

``sdk_client(seller, "1.0")`` is what ``create_client`` makes of our card: its
first ``supportedInterfaces`` entry, JSON-RPC 1.0 (``SendMessage`` ...,
``A2A-Version: 1.0``). ``sdk_client(seller, "0.3")`` is the same SDK given the
card as a 0.3 client reads it (without ``supportedInterfaces``): the SDK then
speaks 0.3 through its compatibility layer (``message/send`` ...,
``A2A-Version: 0.3``). The recorder keeps every exchange for assertions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.service_parameters import ServiceParametersFactory, with_a2a_extensions
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, Task
from google.protobuf.json_format import MessageToDict, ParseDict

from tests.support.a2a_jsonrpc import X402_EXTENSION
from tests.support.seller import Seller

X402 = ClientCallContext(
    service_parameters=ServiceParametersFactory.create([with_a2a_extensions([X402_EXTENSION])])
)
#: JSON-RPC method names each mode must use on the wire.
METHODS = {
    "1.0": {"send": "SendMessage", "stream": "SendStreamingMessage", "get": "GetTask"},
    "0.3": {"send": "message/send", "stream": "message/stream", "get": "tasks/get"},
}


class Recorder(httpx.AsyncBaseTransport):
    """Keeps every request and response the SDK client exchanged (for the assertions)."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[tuple[httpx.Request, httpx.Response]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        response = await self._inner.handle_async_request(request)
        self.exchanges.append((request, response))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def calls(self) -> list[tuple[httpx.Request, httpx.Response]]:
        return [(q, r) for q, r in self.exchanges if q.method == "POST"]

    def methods(self) -> list[str]:
        return [json.loads(q.content)["method"] for q, _ in self.calls()]


@asynccontextmanager
async def sdk_client(
    seller: Seller, version: str, *, streaming: bool = False
) -> AsyncIterator[tuple[Client, Recorder]]:
    recorder = Recorder()
    async with httpx.AsyncClient(transport=recorder, timeout=60) as http:
        # The card is negotiated by A2A-Version (docs/a2a.md, "Two agent cards").
        card_url = f"{seller.server.url}/.well-known/agent-card.json"
        card = (await http.get(card_url, headers={"A2A-Version": version})).json()
        if version == "0.3":
            del card["supportedInterfaces"]
        config = ClientConfig(httpx_client=http, streaming=streaming)
        client = ClientFactory(config).create(parse_agent_card(card))
        try:
            yield client, recorder
        finally:
            await client.close()


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


async def events(client: Client, message: Message) -> list[StreamResponse]:
    return [a async for a in client.send_message(SendMessageRequest(message=message), context=X402)]


async def send(client: Client, message: Message) -> StreamResponse:
    [answer] = await events(client, message)
    return answer


def status_metadata(task: Task) -> dict[str, Any]:
    return dict(MessageToDict(task.status.message.metadata))
