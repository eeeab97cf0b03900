"""Pay x402srv with the official x402 client, then call the seller's API with the token."""

import asyncio
import os
import uuid
from typing import Any

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http import x402HTTPClient
from x402.http.clients import x402HttpxClient
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

ACCESS_URL = os.environ["ACCESS_URL"]  # https://pay.example.com/x402/access
API_URL = os.environ["API_URL"]  # the seller's protected route
PAY_TO = os.environ["PAY_TO"]  # the seller's wallet, learnt from a source you trust
RETRYABLE = {409, 500, 502, 503}  # answered with Retry-After: ask again, same request

client = x402Client()
client.register(
    "eip155:*",
    ExactEvmClientScheme(EthAccountSigner(Account.from_key(os.environ["BUYER_KEY"]))),
)
# Never pay anyone but this seller, whatever a 402 says:
client.register_policy(
    lambda version, offers: [o for o in offers if o.pay_to.lower() == PAY_TO.lower()]
)
# USDC on Base and Base Sepolia is allowed by default, at most $1 per payment. Any other
# token (like the demo chain's) must be listed, with a cap in atomic units:
if "TOKEN_ADDRESS" in os.environ:
    client.set_spend_controls(
        {
            "allowed_assets": [
                {
                    "network": os.environ["NETWORK"],
                    "asset": os.environ["TOKEN_ADDRESS"],
                    "max_amount_per_payment": "2000000",  # 2.00 USDC
                }
            ]
        }
    )


async def post_until_settled(
    http: httpx.AsyncClient, body: dict[str, str], headers: dict[str, str] | None = None
) -> httpx.Response:
    """POST the same request until it is no longer 'come back later'."""
    for _ in range(30):
        response = await http.post(ACCESS_URL, json=body, headers=headers)
        if response.status_code not in RETRYABLE or "retry-after" not in response.headers:
            return response
        await asyncio.sleep(int(response.headers["retry-after"]))
    raise TimeoutError("the settlement is still pending; retry later with the same requestId")


async def buy(http: httpx.AsyncClient, plan_id: str, request_id: str) -> dict[str, Any]:
    """Challenge-first. Store request_id BEFORE calling: it is how you get the grant back."""
    response = await post_until_settled(http, {"planId": plan_id, "requestId": request_id})
    if response.status_code != 200:
        problem = response.json()  # application/problem+json
        raise RuntimeError(f"{problem['code']}: {problem.get('reason') or problem['detail']}")
    grant: dict[str, Any] = response.json()  # the AccessGrant
    return grant


async def main() -> None:
    async with x402HttpxClient(client, timeout=60) as http:
        request_id = str(uuid.uuid4())  # persist it with your agent's state first
        grant = await buy(http, "hourly", request_id)
        print("grant:", grant["planId"], grant["txHash"], "until", grant["expiresAt"])
        again = await buy(http, "hourly", request_id)  # lost it? same requestId, no payment
        assert again == grant

        # Discovery-first: POST {} offers every plan; the client pays the first one its
        # policies accept. Keep the payment header: before the grant arrives it is the
        # only handle on this purchase (a 409/502 is retried by re-sending it).
        sent: list[dict[str, str]] = []
        client.on_after_payment_creation(
            lambda ctx: sent.append(
                x402HTTPClient(client).encode_payment_signature_header(ctx.payment_payload)
            )
        )
        first = await http.post(ACCESS_URL, json={})
        if first.status_code in RETRYABLE:
            async with httpx.AsyncClient() as plain:  # no new payment: the same header again
                first = await post_until_settled(plain, {}, headers=sent[-1])
        print("discovery-first:", first.status_code, first.json()["planId"])
        async with httpx.AsyncClient() as plain:  # what a retry after a 502 would get
            replay = await post_until_settled(plain, {}, headers=sent[-1])
        assert replay.json() == first.json(), replay.text

    async with httpx.AsyncClient() as plain:
        weather = await plain.get(
            API_URL, headers={"Authorization": f"Bearer {grant['accessToken']}"}
        )
        print("protected route:", weather.status_code, weather.json())


asyncio.run(main())
