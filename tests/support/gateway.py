"""The test gateway: its routes, tokens minted as its issuer would, what its upstream saw.

``tests/integrations/conftest.py`` starts the gateway (x402srv with ``[[routes]]``)
in front of ``tests/integrations/apps/echo_upstream.py``; the tests here and in other
directories mint tokens without a purchase and read the upstream's echo.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

from tests.support.seller import JWT_SECRET
from x402srv.default_plugins.jwt_issuer import JwtIssuer
from x402srv.interfaces import GrantRequest
from x402srv.testing.servers import free_port

AGENT_URL = "http://127.0.0.1"  # what x402srv.testing.servers.seller_config sets
UPSTREAM_SECRET = "gateway-shared-secret-" + "g" * 16


def gateway_routes(upstream_url: str) -> list[dict[str, object]]:
    """The ``[[routes]]`` of the test gateway: one per behaviour under test."""
    return [
        {"prefix": "/api", "upstream": upstream_url, "secret": UPSTREAM_SECRET},
        {"prefix": "/api/premium", "upstream": upstream_url, "plans": ["daily"]},
        {"prefix": "/strip", "upstream": upstream_url + "/base", "strip_prefix": True},
        {"prefix": "/slow", "upstream": upstream_url, "read_timeout_seconds": 0.5},
        {"prefix": "/down", "upstream": f"http://127.0.0.1:{free_port()}"},
        {"prefix": "/small", "upstream": upstream_url, "max_body_bytes": 1000},
    ]


async def mint_token(
    plan_id: str = "hourly",
    *,
    ttl: int = 600,
    secret: str = JWT_SECRET,
    payer: str = "0x" + "ab" * 20,
    issued_ago: float = 0.0,
) -> str:
    """A token exactly as the gateway's own ``jwt`` issuer signs one (no purchase needed).

    ``issued_ago``: seconds before now on the issuer's clock, so a test gets a token
    that has already expired (``ttl=1, issued_ago=1.1``) without waiting for it to.
    """
    issuer = JwtIssuer(
        secret.encode(),
        issuer=AGENT_URL,
        audience=AGENT_URL,
        clock=lambda: time.time() - issued_ago,
    )
    credential = await issuer.issue(
        GrantRequest(
            request_id=str(uuid.uuid4()),
            challenge_id=str(uuid.uuid4()),
            plan_id=plan_id,
            resource_id="default",
            tx_hash="0x" + secrets.token_hex(32),
            payer=payer,
            token_ttl_seconds=ttl,
        )
    )
    return credential.token


def ed25519_pem() -> str:
    """A fresh Ed25519 private key, PKCS#8 PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


def eddsa_credentials(kid: str) -> dict[str, str]:
    """A ``[credentials]`` table signing EdDSA tokens with a fresh key named ``kid``."""
    return {"algorithm": "EdDSA", "private_key": ed25519_pem(), "kid": kid}


def received_headers(echo: dict[str, Any]) -> dict[str, list[str]]:
    """The headers the echo upstream says it received, by lower-case name."""
    headers: dict[str, list[str]] = {}
    for name, value in echo["headers"]:
        headers.setdefault(name.lower(), []).append(value)
    return headers
