"""Built-in credential issuer ``jwt`` (the default): signed ``at+jwt`` access tokens.

The claims: docs/protocol/wire.md, "Access tokens".

HS256 with a shared secret (the seller's API holds the same secret), or EdDSA
with an Ed25519 private key whose public half is served as a JWKS, so the API
needs no secret at all. Key loading, key ids and the JWK come from
``x402srv.tokens.verify``: what this module signs is exactly what ``TokenVerifier``
checks.

The ``kid`` is ``[credentials] kid`` when set (to rotate keys by name), else
derived from the key: the RFC 7638 thumbprint for Ed25519, a labelled hash
prefix for an HMAC secret (an id, never the secret).
"""

from __future__ import annotations

from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from x402srv.config.fields import PluginOptions
from x402srv.hookspecs import Register, hookimpl
from x402srv.interfaces import Clock, CredentialIssuer, GrantRequest, IssuedCredential
from x402srv.server.plugin_context import PluginContext
from x402srv.tokens.verify import (
    ACCESS_JWT_TYPE,
    Ed25519KeySource,
    KeyRing,
    key_ring_for,
    key_source_for,
    load_signing_key,
)

__all__ = ["JwtIssuer", "build_jwt_issuer", "register_credential_issuers"]

_BEARER_SCHEME = "Bearer"


class _NoOptions(PluginOptions):
    """``[credentials.jwt]`` takes no keys: everything lives in ``[credentials]``."""


class JwtIssuer:
    """Signs one token per paid challenge; the time is the injected clock's."""

    name = "jwt"
    #: A local signature with no side effect: concurrent deliveries need no claim.
    exclusive = False

    def __init__(
        self,
        key: bytes | Ed25519PrivateKey,
        *,
        issuer: str,
        audience: str,
        clock: Clock,
        kid: str | None = None,
        ring: KeyRing | None = None,
    ) -> None:
        self._key = key
        # The verifier's own view of this key: same algorithm, same kid, same public JWK.
        self._verification = key_source_for(key, kid=kid)
        self._ring = ring or KeyRing([self._verification])
        self._issuer = issuer
        self._audience = audience
        self._clock = clock

    def __repr__(self) -> str:
        return (
            f"JwtIssuer({self._verification!r}, issuer={self._issuer!r}, "
            f"audience={self._audience!r})"
        )

    @property
    def algorithm(self) -> str:
        return self._verification.algorithm

    @property
    def kid(self) -> str:
        return self._verification.kid

    async def start(self) -> None:
        """Nothing to open: the key was loaded when the factory ran."""

    async def close(self) -> None:
        """Nothing to close."""

    async def issue(self, request: GrantRequest) -> IssuedCredential:
        # Whole seconds: NumericDate readers differ on fractions, and exp must equal iat + ttl.
        issued_at = int(self._clock())
        expires_at = issued_at + request.token_ttl_seconds
        claims = {
            "iss": self._issuer,
            "sub": request.request_id,
            "aud": self._audience,
            "iat": issued_at,
            "exp": expires_at,
            "jti": request.challenge_id,
            "resourceId": request.resource_id,
            "planId": request.plan_id,
            "txHash": request.tx_hash,
            "payer": request.payer,
        }
        # Signing is a few microseconds (HMAC) to tens of them (Ed25519): fine on the loop.
        token = jwt.encode(
            claims,
            self._key,
            algorithm=self.algorithm,
            headers={"typ": ACCESS_JWT_TYPE, "kid": self.kid},
        )
        return IssuedCredential(
            token=token, token_type=_BEARER_SCHEME, expires_at=float(expires_at)
        )

    def jwks(self) -> dict[str, Any] | None:
        """The current and the previous public keys: verifiers accept both during rotation."""
        if isinstance(self._verification, Ed25519KeySource):
            return self._ring.jwks()
        return None


def build_jwt_issuer(ctx: PluginContext) -> JwtIssuer:
    """The factory the registry calls when ``[credentials] issuer = "jwt"``."""
    ctx.parse_options(_NoOptions)
    credentials = ctx.config.credentials
    agent_url = ctx.config.seller.agent_url
    return JwtIssuer(
        load_signing_key(credentials),
        issuer=agent_url,
        audience=credentials.audience or agent_url,
        clock=ctx.clock,
        kid=credentials.kid,
        ring=key_ring_for(credentials),
    )


@hookimpl
def register_credential_issuers(register: Register[CredentialIssuer]) -> None:
    register("jwt", build_jwt_issuer)
