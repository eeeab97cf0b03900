"""Issuers, tokens and guarded apps for the credential and token-verification tests.

Tokens that no honest issuer would make (``alg: none``, HS256 keyed with a
public key, ...) are assembled by hand here, because pyjwt refuses to sign
most of them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sanic import Request, Sanic
from sanic.response import HTTPResponse
from sanic.response import json as json_response

from x402srv import guard
from x402srv.config.models import Config, parse_config
from x402srv.default_plugins import callback_issuer, jwt_issuer
from x402srv.hookspecs import Factory
from x402srv.interfaces import GrantRequest
from x402srv.server.plugin_context import PluginContext
from x402srv.tokens.verify import TokenVerifier

AGENT_URL = "https://api.example.com"
SECRET = "credentials-test-secret-" + "0123456789abcdef" * 2  # 56 bytes
FROZEN_NOW = 1_767_225_600  # 2026-01-01T00:00:00Z
TTL = 3600


@dataclass
class FrozenClock:
    """A clock that moves only when told to."""

    now: float = FROZEN_NOW

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_config(**credentials: Any) -> Config:
    """A valid seller config whose ``[credentials]`` table is ``credentials``."""
    return parse_config(
        {
            "seller": {
                "agent_name": "Weather Oracle",
                "agent_description": "Paid hourly weather data",
                "agent_url": AGENT_URL,
                "provider_name": "Example Inc",
                "provider_url": "https://example.com",
                "wallet_address": "0x" + "11" * 20,
                "network": "base-sepolia",
            },
            "plans": [{"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour"}],
            "credentials": credentials,
        },
        env={},
    )


def grant_request(**overrides: Any) -> GrantRequest:
    fields: dict[str, Any] = {
        "request_id": "6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11",
        "challenge_id": "ch_7Yq2n4Kp",
        "plan_id": "hourly",
        "resource_id": "weather:berlin",
        "tx_hash": "0x" + "ab" * 32,
        "payer": "0x" + "22" * 20,
        "token_ttl_seconds": TTL,
    }
    fields.update(overrides)
    return GrantRequest(**fields)


def build_issuer(
    name: str, config: Config, clock: FrozenClock, options: Mapping[str, Any] | None = None
) -> Any:
    """Build a built-in issuer the way the registry does: through its registration hook."""
    factories: dict[str, Factory[Any]] = {}
    for module in (jwt_issuer, callback_issuer):
        module.register_credential_issuers(register=factories.__setitem__)
    ctx = PluginContext(
        config=config,
        name=name,
        key_path=f"credentials.{name}",
        options=dict(options or {}),
        clock=clock,
    )
    return factories[name](ctx)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def access_claims(now: float = FROZEN_NOW, **overrides: Any) -> dict[str, Any]:
    """The claims the jwt issuer would sign at ``now``; ``None`` values drop a claim."""
    claims: dict[str, Any] = {
        "iss": AGENT_URL,
        "sub": "6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11",
        "aud": AGENT_URL,
        "iat": int(now),
        "exp": int(now) + TTL,
        "jti": "ch_7Yq2n4Kp",
        "resourceId": "weather:berlin",
        "planId": "hourly",
        "txHash": "0x" + "ab" * 32,
        "payer": "0x" + "22" * 20,
    }
    claims.update(overrides)
    return {key: value for key, value in claims.items() if value is not None}


def forge(
    header: Mapping[str, Any],
    claims: Mapping[str, Any],
    *,
    hmac_key: bytes | None = None,
    ed25519_key: Ed25519PrivateKey | None = None,
) -> str:
    """A compact JWS with exactly this header, signed as told (or unsigned)."""
    signing_input = ".".join(
        b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    )
    if hmac_key is not None:
        signature = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    elif ed25519_key is not None:
        signature = ed25519_key.sign(signing_input.encode())
    else:
        signature = b""
    return f"{signing_input}.{b64url(signature)}"


def guarded_app(verifier: TokenVerifier, style: str) -> Sanic[Any, Any]:
    """A seller API with ``/api/data`` behind the guard, put there one way or the other.

    ``style`` is ``"decorator"`` (``@require_access``) or ``"middleware"``
    (``access_guard`` over ``/api``). The handler answers with the claims it saw.
    """
    app: Sanic[Any, Any] = Sanic("x402srv-credentials-test")
    # sanic-testing restarts the app for every request; touch-up (Sanic recompiling its own
    # request cycle) is two thirds of that time and changes nothing the guard does.
    app.config.TOUCHUP = False

    async def data(request: Request) -> HTTPResponse:
        claims = guard.access_claims(request)
        return json_response({"handler": "data", "planId": claims.plan_id})

    async def public(request: Request) -> HTTPResponse:
        return json_response({"handler": "public"})

    if style == "decorator":
        app.add_route(guard.require_access(verifier)(data), "/api/data")
    else:
        guard.access_guard(app, verifier, paths=["/api"])
        app.add_route(data, "/api/data")
    app.add_route(public, "/public")
    return app


def assert_refused(response: Any, code: str = "INVALID_TOKEN") -> dict[str, Any]:
    """A 401 problem document (docs/errors.md) that the handler never saw."""
    assert response.status == 401, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    body: dict[str, Any] = response.json
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert body["type"] == "about:blank"
    assert body["status"] == 401
    assert body["code"] == code
    assert body["title"] in ("Invalid access token", "Access token expired")
    assert "handler" not in body
    return body


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
