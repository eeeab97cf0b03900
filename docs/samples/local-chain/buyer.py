"""Buy a plan from your local seller with the official x402 client, as anvil's dev #2."""

import asyncio
import os
import uuid

from eth_account import Account
from x402 import x402Client
from x402.http.clients import x402HttpxClient
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

ACCESS_URL = "http://127.0.0.1:8402/x402/access"
ASSET = "0x5FbDB2315678afecb367f032d93F642f64180aa3"  # the test token: listed, with a cap

client = x402Client()
client.register(
    "eip155:*",
    ExactEvmClientScheme(EthAccountSigner(Account.from_key(os.environ["BUYER_KEY"]))),
)
client.set_spend_controls(
    {
        "allowed_assets": [
            {"network": "eip155:31337", "asset": ASSET, "max_amount_per_payment": "2000000"}
        ]
    }
)


async def main() -> None:
    async with x402HttpxClient(client, timeout=60) as http:
        body = {"planId": "hourly", "requestId": str(uuid.uuid4())}  # keep the requestId
        answer = await http.post(ACCESS_URL, json=body)
        answer.raise_for_status()
        grant = answer.json()
        print("grant:", grant["planId"], grant["txHash"], "until", grant["expiresAt"])


asyncio.run(main())
