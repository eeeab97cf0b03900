"""Buy 1,000 completions for $1 with the official x402 client; top up when they run out."""

import asyncio
import os
import uuid
from typing import Any

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http.clients import x402HttpxClient
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

ACCESS_URL = os.environ["ACCESS_URL"]  # https://pay.example.com/x402/access
LLM_URL = os.environ["LLM_URL"]  # https://llm.example.com
PAY_TO = os.environ["PAY_TO"]  # the seller's wallet, learnt from a source you trust
CALLS = int(os.environ.get("CALLS", "3"))

client = x402Client()
client.register(
    "eip155:*",
    ExactEvmClientScheme(EthAccountSigner(Account.from_key(os.environ["BUYER_KEY"]))),
)
client.register_policy(  # never pay anyone but this seller
    lambda version, offers: [o for o in offers if o.pay_to.lower() == PAY_TO.lower()]
)
if "TOKEN_ADDRESS" in os.environ:  # a token other than USDC (the demo chain's): allow it
    client.set_spend_controls(
        {
            "allowed_assets": [
                {
                    "network": os.environ["NETWORK"],
                    "asset": os.environ["TOKEN_ADDRESS"],
                    "max_amount_per_payment": "1000000",  # 1.00 USDC
                }
            ]
        }
    )


async def pay(http: httpx.AsyncClient, body: dict[str, str]) -> dict[str, Any]:
    """One paid request to x402srv: the 402, the payment, the answer (an AccessGrant, a TopUp)."""
    response = await http.post(ACCESS_URL, json=body)
    if response.status_code != 200:  # 409/502 with Retry-After: send the same body again later
        raise RuntimeError(f"{response.status_code}: {response.text}")
    answer: dict[str, Any] = response.json()
    return answer


async def main() -> None:
    async with x402HttpxClient(client, timeout=60) as paying, httpx.AsyncClient() as llm:
        grant_request = str(uuid.uuid4())  # persist it first: it fetches the grant and tops it up
        grant = await pay(paying, {"planId": "llm-1k", "requestId": grant_request})
        print("bought:", grant["planId"], "until", grant["expiresAt"])
        auth = {"Authorization": f"Bearer {grant['accessToken']}"}  # the only token it needs
        top_ups = 0
        for n in range(1, CALLS + 1):
            while True:
                answer = await llm.post(
                    f"{LLM_URL}/v1/completions", json={"prompt": f"Question {n}?"}, headers=auth
                )
                if answer.status_code == 429:  # this grant's rate limit: wait as told
                    await asyncio.sleep(int(answer.headers["Retry-After"]))
                    continue
                if answer.status_code == 402 and answer.json()["code"] == "CREDITS_EXHAUSTED":
                    # The same grant gets another 1,000; the token stays the same.
                    request = {**answer.json()["topUp"]["body"], "requestId": str(uuid.uuid4())}
                    receipt = await pay(paying, request)
                    top_ups += 1
                    print("topped up:", receipt["calls"], "calls, tx", receipt["txHash"])
                    continue
                answer.raise_for_status()
                break
        print("completions:", CALLS, "top-ups:", top_ups)
        print("last:", answer.json()["completion"])
        print("RateLimit:", answer.headers["RateLimit"])


asyncio.run(main())
