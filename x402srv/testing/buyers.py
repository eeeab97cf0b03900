"""Buyers for tests: the official x402 client, and hand-made payments for attacks.

``official_client`` is exactly what a buyer agent runs (the ``x402`` SDK's
client with its EVM exact scheme); tests must not need custom code to buy.
``signed_payment`` builds a ``PAYMENT-SIGNATURE`` header field by field so a
test can change one thing (payTo, amount, chain, signer, validBefore ...).
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount

from x402srv.config.models import Config
from x402srv.devchain import TokenInfo, sign_transfer_authorization
from x402srv.interfaces import Authorization, SettlementRequest

__all__ = [
    "RecordingTransport",
    "encode_payment",
    "official_client",
    "paying_client",
    "settlement_request",
    "signed_payment",
]


def official_client(account: LocalAccount) -> Any:
    """An ``x402Client`` that pays with ``account`` on any eip155 network, no spend caps."""
    from x402 import x402Client
    from x402.mechanisms.evm.exact import ExactEvmClientScheme
    from x402.mechanisms.evm.signers import EthAccountSigner

    client = x402Client()
    client.register("eip155:*", ExactEvmClientScheme(EthAccountSigner(account)))
    client.set_spend_controls(False)  # our test token is not on the SDK's allow-list
    return client


class RecordingTransport(httpx.AsyncBaseTransport):
    """Sits under the official x402 transport and keeps every request it sends."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        self.requests.append(request)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def payment_headers(self) -> list[str]:
        return [
            r.headers["payment-signature"]
            for r in self.requests
            if "payment-signature" in r.headers
        ]


def paying_client(
    account: LocalAccount, **kwargs: Any
) -> tuple[httpx.AsyncClient, RecordingTransport]:
    """An httpx client that pays 402s like a buyer agent would (the official transport)."""
    from x402.http.clients.httpx import x402AsyncTransport

    recorder = RecordingTransport()
    transport = x402AsyncTransport(official_client(account), recorder)
    return httpx.AsyncClient(transport=transport, timeout=30, **kwargs), recorder


def encode_payment(payload: dict[str, Any], *, urlsafe: bool = False) -> str:
    raw = json.dumps(payload, separators=(",", ":")).encode()
    if urlsafe:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return base64.b64encode(raw).decode()


def signed_payment(
    account: LocalAccount,
    token: TokenInfo,
    accepted: dict[str, Any],
    *,
    to: str | None = None,
    value: int | None = None,
    valid_after: int = 0,
    valid_before: int | None = None,
    nonce: bytes | None = None,
    sign_with: LocalAccount | None = None,
    sign_token: TokenInfo | None = None,
) -> dict[str, Any]:
    """A v2 PaymentPayload for ``accepted``; every keyword overrides one signed field."""
    nonce = nonce or secrets.token_bytes(32)
    valid_before = valid_before or int(time.time()) + int(accepted["maxTimeoutSeconds"])
    signature, authorization = sign_transfer_authorization(
        sign_with or account,
        sign_token or token,
        to=to or accepted["payTo"],
        value=int(accepted["amount"]) if value is None else value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=nonce,
    )
    authorization["from"] = account.address
    return {
        "x402Version": 2,
        "payload": {"signature": signature, "authorization": authorization},
        "accepted": accepted,
    }


def settlement_request(
    config: Config, signature: str, authorization: Mapping[str, Any], *, challenge: str = "c1"
) -> SettlementRequest:
    """A SettlementRequest as the pipeline builds it from an x402 wire authorization."""
    info = config.network_info
    requirements = {
        "scheme": "exact",
        "network": info.caip2,
        "amount": str(authorization["value"]),
        "asset": info.asset,
        "payTo": authorization["to"],
        "maxTimeoutSeconds": 300,
        "extra": {"name": info.asset_name, "version": info.asset_version},
    }
    return SettlementRequest(
        challenge_id=challenge,
        attempt_id=f"{challenge}-attempt",
        authorization=Authorization(
            payer=str(authorization["from"]),
            to=str(authorization["to"]),
            value=int(authorization["value"]),
            valid_after=int(authorization["validAfter"]),
            valid_before=int(authorization["validBefore"]),
            nonce=str(authorization["nonce"]),
            signature=signature,
        ),
        payload={
            "x402Version": 2,
            "payload": {"authorization": dict(authorization), "signature": signature},
            "accepted": requirements,
        },
        requirements=requirements,
        network=info,
    )
