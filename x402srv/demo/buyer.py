"""The demo's buyer agent: the official ``x402`` client, plus a recorder to show the wire.

``buy`` is what a buyer writes (see docs/buyers.md): an ``x402Client`` with the EVM
``exact`` scheme signing with the buyer's key, wrapped around httpx. The SDK does
everything (reads the 402, signs the EIP-3009 authorization, retries with
``PAYMENT-SIGNATURE``); the demo only slips a recording transport underneath so it
can print what actually went over the wire, not a reconstruction of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from eth_account.signers.local import LocalAccount
from x402 import x402Client
from x402.http.clients.httpx import x402_httpx_transport
from x402.mechanisms.evm.exact import ExactEvmClientScheme
from x402.mechanisms.evm.signers import EthAccountSigner

__all__ = ["Exchange", "RecordingTransport", "buy"]


@dataclass(frozen=True)
class Exchange:
    """One request the client sent and the answer it got, both read in full."""

    request: httpx.Request
    response: httpx.Response


class RecordingTransport(httpx.AsyncBaseTransport):
    """Keeps every exchange that passes through; sits under the x402 transport."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        response = await self._inner.handle_async_request(request)
        await response.aread()
        self.exchanges.append(Exchange(request, response))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


async def buy(
    access_url: str,
    buyer: LocalAccount,
    *,
    plan_id: str,
    request_id: str,
    network: str,
    asset: str,
    max_atomic: int,
) -> tuple[httpx.Response, list[Exchange]]:
    """Challenge-first purchase: POST the plan, let the SDK pay the 402, return the grant.

    Spend controls stay on: the SDK only pays assets it knows (real USDC) unless told,
    so the demo's token is allowed explicitly, with a cap per payment.
    """
    client = x402Client()
    client.register("eip155:*", ExactEvmClientScheme(EthAccountSigner(buyer)))
    client.set_spend_controls(
        {
            "allowed_assets": [
                {"network": network, "asset": asset, "max_amount_per_payment": str(max_atomic)}
            ]
        }
    )
    recorder = RecordingTransport()
    transport = x402_httpx_transport(client, recorder)
    async with httpx.AsyncClient(transport=transport, timeout=30) as http:
        response = await http.post(access_url, json={"planId": plan_id, "requestId": request_id})
    return response, recorder.exchanges
