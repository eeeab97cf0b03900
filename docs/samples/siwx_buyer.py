"""Get back what a wallet bought, without paying again: sign-in-with-x (SIWX).

All it holds is the wallet's key. The official client signs the 402's
sign-in-with-x message; x402srv answers the wallet's live grant, or the 402
again when it holds none (then the client pays, as usual).
"""

import asyncio
import base64
import json
import os

import httpx
from eth_account import Account
from x402 import x402Client
from x402.extensions.sign_in_with_x import (
    CreateSIWxClientExtensionOptions,
    create_siwx_client_extension,
)
from x402.http.clients.httpx import x402AsyncTransport
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

ACCESS_URL = os.environ["ACCESS_URL"]  # https://pay.example.com/x402/access
PAID_URL = os.environ.get("PAID_URL")  # a gateway route, if the seller has one
PAY_TO = os.environ["PAY_TO"]  # the seller's wallet, learnt from a source you trust

account = Account.from_key(os.environ["BUYER_KEY"])
client = x402Client()
client.register("eip155:*", ExactEvmClientScheme(EthAccountSigner(account)))
client.register_policy(
    lambda version, offers: [o for o in offers if o.pay_to.lower() == PAY_TO.lower()]
)
# Sign in with the same wallet before paying: the SDK's SIWX extension answers every 402
# that declares sign-in-with-x by signing its message and sending the request again.
client.register_extension(create_siwx_client_extension(CreateSIWxClientExtensionOptions([account])))


class Shown(httpx.AsyncHTTPTransport):
    """Prints each request's sign-in (the signature shortened) and the status it got."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        header = request.headers.get("sign-in-with-x")
        if header:
            signed = json.loads(base64.b64decode(header))
            signed["signature"] = signed["signature"][:18] + "…"
            print("sent SIGN-IN-WITH-X:", json.dumps(signed))
        response = await super().handle_async_request(request)
        paid = " (paid)" if "payment-signature" in request.headers else ""
        print(f"{request.method} {request.url} -> {response.status_code}{paid}")
        return response


async def main() -> None:
    transport = x402AsyncTransport(client, Shown())
    async with httpx.AsyncClient(transport=transport, timeout=60) as http:
        grant = await http.post(ACCESS_URL, json={"planId": "hourly"})
        print("/x402/access:", grant.status_code, json.dumps(grant.json()))
        if PAID_URL:
            answer = await http.get(PAID_URL)
            print(PAID_URL, answer.status_code, answer.headers.get("x-x402-access-token"))


asyncio.run(main())
