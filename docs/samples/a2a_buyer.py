"""Buy a plan over A2A with the official a2a-sdk client, paying with the official x402 client."""

import uuid
from typing import Any

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict, ParseDict
from x402 import x402Client
from x402.schemas import PaymentRequired


async def buy_over_a2a(seller_url: str, x402_client: x402Client) -> dict[str, Any]:
    """The AccessGrant of the hourly plan: two messages on one task."""
    agent = await create_client(seller_url, ClientConfig(streaming=False))  # reads the card
    try:
        ask = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()))
        ask.parts.append(ParseDict({"data": {"planId": "hourly"}}, Part()))
        [answer] = [a async for a in agent.send_message(SendMessageRequest(message=ask))]
        required = MessageToDict(answer.task.status.message.metadata)["x402.payment.required"]
        payload = await x402_client.create_payment_payload(PaymentRequired.model_validate(required))

        pay = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=answer.task.id)
        pay.parts.append(Part(text="Here is the payment."))
        wire = payload.model_dump(mode="json", by_alias=True, exclude_none=True)
        ParseDict(
            {"x402.payment.status": "payment-submitted", "x402.payment.payload": wire},
            pay.metadata,
        )
        [done] = [a async for a in agent.send_message(SendMessageRequest(message=pay))]
    finally:
        await agent.close()
    grant: dict[str, Any] = MessageToDict(done.task.artifacts[0].parts[0].data)
    return grant  # grant["accessToken"]: the bearer token
