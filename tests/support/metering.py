"""Plans that sell calls, the metering gateway's routes, and reading the RateLimit fields.

``tests/metering/conftest.py`` starts an x402srv gateway with these plans and
routes in front of the echo upstream (``tests/integrations/apps/echo_upstream.py``);
tests buy with the official x402 client and read what every metered answer says.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import time
import uuid
from typing import Any

import httpx

from tests.support.gateway import AGENT_URL
from tests.support.seller import JWT_SECRET
from x402srv.default_plugins.jwt_issuer import JwtIssuer
from x402srv.interfaces import GrantRequest
from x402srv.testing.servers import free_port
from x402srv.tokens.verify import AccessClaims, HS256KeySource, TokenVerifier

#: A purchase credits 3 calls (through routes that cost 1, or 2 under /llm/batch).
CALLS_3: dict[str, Any] = {
    "plan_id": "calls-3",
    "unit_amount": "$0.01",
    "description": "Three completions",
    "calls": 3,
}
#: Sold by time, two calls per grant and day: a test's calls all fall in one window.
RATED: dict[str, Any] = {
    "plan_id": "rated",
    "unit_amount": "$0.02",
    "description": "An hour, two calls a day",
    "token_ttl_seconds": 3600,
    "rate_limit": "2/day",
}
#: Calls and a rate: 50 credits, at most 1000 calls per grant and day.
CALLS_50: dict[str, Any] = {
    "plan_id": "calls-50",
    "unit_amount": "$0.05",
    "description": "Fifty completions",
    "calls": 50,
    "rate_limit": "1000/day",
}
HOURLY: dict[str, Any] = {
    "plan_id": "hourly",
    "unit_amount": "$0.10",
    "description": "One hour of API access",
}
PLANS = [HOURLY, CALLS_3, RATED, CALLS_50]
CALLS_3_AMOUNT = 10_000  # $0.01 at 6 decimals


def metering_routes(upstream_url: str) -> list[dict[str, Any]]:
    return [
        {"prefix": "/llm", "upstream": upstream_url, "plans": ["calls-3"]},
        {"prefix": "/llm/batch", "upstream": upstream_url, "plans": ["calls-3"], "cost": 2},
        {
            "prefix": "/llm/fragile",
            "upstream": upstream_url,
            "plans": ["calls-3"],
            "refund_on_5xx": False,
        },
        {
            # (nothing listens there: every call is a 502 that never reached an upstream)
            "prefix": "/llm/gone",
            "upstream": f"http://127.0.0.1:{free_port()}",
            "plans": ["calls-3"],
            "refund_on_5xx": False,
        },
        {
            "prefix": "/llm/gone-by-use",
            "upstream": f"http://127.0.0.1:{free_port()}",
            "plans": ["calls-3"],
            "refund_on_5xx": False,
            "cost": {"reserve": 1, "from": "header"},
        },
        {"prefix": "/chat", "upstream": upstream_url, "plans": ["rated"]},
        {"prefix": "/bulk", "upstream": upstream_url, "plans": ["calls-50"]},
        {"prefix": "/free", "upstream": upstream_url, "plans": ["hourly"]},
    ]


_ITEM = re.compile(r'"([^"]+)"((?:;[a-z]+=[0-9]+)+)')


def limits(value: str) -> dict[str, dict[str, int]]:
    """``'"credits";r=2;t=60, "rate";r=1;t=5'`` -> ``{"credits": {"r": 2, "t": 60}, ...}``."""
    items = [_ITEM.fullmatch(item.strip()) for item in value.split(",")]
    assert all(items), f"not a list of RateLimit items: {value!r}"
    return {
        m[1]: {k: int(v) for k, v in (p.split("=") for p in m[2][1:].split(";"))}
        for m in items
        if m is not None
    }


def shown(response: httpx.Response) -> str:
    """What a buyer reads on one answer: status, RateLimit, RateLimit-Policy, Retry-After."""
    parts = [str(response.status_code)]
    for name in ("RateLimit", "RateLimit-Policy", "Retry-After"):
        if name in response.headers:
            parts.append(f"{name}: {response.headers[name]}")
    return " | ".join(parts)


def payment_required(response: httpx.Response) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(response.headers["payment-required"])))


async def minted(
    plan_id: str, *, ttl: int = 3600, now: float | None = None
) -> tuple[str, AccessClaims]:
    """A token as the gateway's ``jwt`` issuer signs one for a purchase, and its claims.

    Its grant (``claims.challenge_id``) has no credits until a test credits it,
    as x402srv's delivery does (``CreditStore.credit`` keyed by the challenge).
    """
    clock = (lambda: now) if now is not None else time.time
    issuer = JwtIssuer(JWT_SECRET.encode(), issuer=AGENT_URL, audience=AGENT_URL, clock=clock)
    credential = await issuer.issue(
        GrantRequest(
            request_id=str(uuid.uuid4()),
            challenge_id=str(uuid.uuid4()),
            plan_id=plan_id,
            resource_id="default",
            tx_hash="0x" + secrets.token_hex(32),
            payer="0x" + "ab" * 20,
            token_ttl_seconds=ttl,
        )
    )
    verifier = TokenVerifier(
        HS256KeySource(JWT_SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=clock
    )
    return credential.token, await verifier.verify(credential.token)


class ExchangeRecorder(httpx.AsyncBaseTransport):
    """Under the official x402 transport: every request it sends and the answer it got."""

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
