"""Credential issuer ``key-service``: the seller's own key service mints the credential.

For sellers whose API already checks its own keys: a paid challenge becomes a
key from ``POST {url}/keys``, which answers ``{"key", "expiresAt"}``. The
request carries ``Idempotency-Key: <challengeId>`` because ``issue`` may run
more than once for one challenge (a retry after a failure, the reconciler);
the service must then hand back the same key, and only one answer is ever
stored in the grant. Replays of the purchase get that stored grant without
calling the service again.

Raising is allowed here, unlike in a settler: the record stays PAID, the buyer
gets ``500`` with ``Retry-After`` and its retry (or the reconciler) asks again.
Only the exception's type reaches the log, never its message.
"""

from __future__ import annotations

from datetime import datetime

import httpx
from pydantic import Field

from x402srv.plugin import (
    BaseIssuer,
    CredentialIssuer,
    GrantRequest,
    IssuedCredential,
    PluginContext,
    PluginOptions,
    Register,
    Secret,
    SecretValue,
    hookimpl,
)

__all__ = [
    "KeyServiceIssuer",
    "KeyServiceOptions",
    "build_key_service",
    "register_credential_issuers",
]

#: The HTTP authentication scheme buyers send the key with (a name, not a secret).
BEARER = "Bearer"


class KeyServiceOptions(PluginOptions):
    """``[credentials.key-service]``"""

    url: str = Field(pattern=r"^https?://")
    #: The service's admin token: ``{ env = "NAME" }``, ``{ file = "path" }`` or inline,
    #: like every secret in the TOML.
    admin_token: SecretValue
    timeout_seconds: float = Field(default=10, gt=0)


class KeyServiceIssuer(BaseIssuer):
    name = "key-service"
    # exclusive = True (BaseIssuer's default): one issue() at a time per challenge,
    # because every call may create a key in the service.

    def __init__(self, options: KeyServiceOptions, admin_token: Secret) -> None:
        self.options = options
        self._admin_token = admin_token  # a Secret: no repr or log line shows it
        self._http: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._http = httpx.AsyncClient(
            base_url=self.options.url,
            headers={"Authorization": f"Bearer {self._admin_token.reveal()}"},
            timeout=self.options.timeout_seconds,
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def issue(self, request: GrantRequest) -> IssuedCredential:
        assert self._http is not None, "start() was not called"
        response = await self._http.post(
            "/keys",
            headers={"Idempotency-Key": request.challenge_id},
            json={
                "owner": request.payer,
                "plan": request.plan_id,
                "resource": request.resource_id,
                "ttlSeconds": request.token_ttl_seconds,
            },
        )
        response.raise_for_status()
        body = response.json()
        expires_at = datetime.fromisoformat(body["expiresAt"]).timestamp()
        return IssuedCredential(token=body["key"], token_type=BEARER, expires_at=expires_at)

    # jwks() stays BaseIssuer's None: opaque keys have nothing to publish.


def build_key_service(ctx: PluginContext) -> KeyServiceIssuer:
    """The factory ``[credentials] issuer = "key-service"`` selects; opens nothing."""
    options = ctx.parse_options(KeyServiceOptions)
    return KeyServiceIssuer(options, options.admin_token)


@hookimpl
def register_credential_issuers(register: Register[CredentialIssuer]) -> None:
    register("key-service", build_key_service)
