"""Buy a plan over an A2A stream and watch the settlement (official a2a-sdk and x402 clients)."""

import uuid
from collections.abc import Callable
from typing import Any

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict
from x402 import x402Client
from x402.schemas import PaymentRequired


async def buy_streaming(
    seller_url: str, x402_client: x402Client, show: Callable[[str], None] = print
) -> dict[str, Any]:
    """The AccessGrant of the hourly plan; ``show`` gets one line per step of the settlement."""
    agent = await create_client(seller_url, ClientConfig(streaming=True))  # reads the card
    try:
        ask = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()))
        ask.parts.append(ParseDict({"data": {"planId": "hourly"}}, Part()))
        [opened] = [e async for e in agent.send_message(SendMessageRequest(message=ask))]
        required = MessageToDict(opened.task.status.message.metadata)["x402.payment.required"]
        payload = await x402_client.create_payment_payload(PaymentRequired.model_validate(required))

        pay = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=opened.task.id)
        pay.parts.append(Part(text="Here is the payment."))
        wire = payload.model_dump(mode="json", by_alias=True, exclude_none=True)
        ParseDict(
            {"x402.payment.status": "payment-submitted", "x402.payment.payload": wire},
            pay.metadata,
        )
        grant: dict[str, Any] = {}
        async for event in agent.send_message(SendMessageRequest(message=pay)):
            kind = event.WhichOneof("payload")  # "task", then "status_update"s and the artifact
            if kind == "artifact_update":
                grant = MessageToDict(event.artifact_update.artifact.parts[0].data)
                show("AccessGrant received")
                continue
            status = event.task.status if kind == "task" else event.status_update.status
            metadata = MessageToDict(status.message.metadata)
            step = f"{TaskState.Name(status.state)} {metadata['x402.payment.status']}"
            show(f"{step} {metadata.get('x402srv.txHash', '')}".strip())
    finally:
        await agent.close()
    return grant  # grant["accessToken"]: the bearer token; the stream ended at "completed"
