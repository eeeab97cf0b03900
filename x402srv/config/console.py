"""``[admin]``, ``[revocation]`` and ``[analytics]``: the seller's console and what it reads.

``[admin]`` is off unless the table is there. It needs an admin credential of
its own: a ``token`` (a long random string, compared in constant time) or a
``jwt_secret`` for admin JWTs minted elsewhere (HS256, ``aud`` = the admin
audience). Neither may be the buyers' ``credentials.secret``: a buyer's
access token never opens the console. ``host``/``port`` put the console and
its API on a listener of their own (bind it to a private interface; the
public port then answers 404 under the prefix).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from x402srv.config.fields import StrictModel
from x402srv.config.secrets import SecretValue

__all__ = [
    "MIN_ADMIN_TOKEN_BYTES",
    "AdminConfig",
    "CountersConfig",
    "RevocationConfig",
]

_PATH = re.compile(r"(/[A-Za-z0-9._~-]+)+")
#: An admin token shorter than this is refused: it opens revocation and cancellation.
MIN_ADMIN_TOKEN_BYTES = 24


_Model = StrictModel


class AdminConfig(_Model):
    """``[admin]``: the console and the admin API (``x402srv.admin``)."""

    enabled: bool = True
    prefix: str = "/admin"
    token: SecretValue | None = None
    jwt_secret: SecretValue | None = None
    jwt_audience: str | None = Field(default=None, min_length=1)
    host: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    secure_cookies: bool | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _PATH.fullmatch(value):
            raise ValueError('must be a path like "/admin" (no trailing slash)')
        if value.startswith("/.well-known") or value.split("/")[1] in {"healthz", "readyz"}:
            raise ValueError(f"{value} is one of x402srv's own paths")
        return value

    @field_validator("token")
    @classmethod
    def _long_token(cls, value: SecretValue | None) -> SecretValue | None:
        if value is not None and len(value.reveal().encode()) < MIN_ADMIN_TOKEN_BYTES:
            raise ValueError(
                f"must be at least {MIN_ADMIN_TOKEN_BYTES} bytes (e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("jwt_secret")
    @classmethod
    def _long_secret(cls, value: SecretValue | None) -> SecretValue | None:
        if value is not None and len(value.reveal().encode()) < 32:
            raise ValueError("an HS256 secret must be at least 32 bytes")
        return value

    @model_validator(mode="after")
    def _credential(self) -> AdminConfig:
        if self.enabled and self.token is None and self.jwt_secret is None:
            raise ValueError(
                ".token: the console needs a credential of its own: token (or jwt_secret)"
            )
        if self.host is not None and self.port is None:
            raise ValueError(".port: host needs a port (the console's own listener)")
        return self

    @property
    def own_listener(self) -> bool:
        return self.port is not None

    @property
    def listen_host(self) -> str:
        return self.host or "127.0.0.1"


class RevocationConfig(_Model):
    """``[revocation]``: how fast a revoked grant stops opening anything.

    Every verifier x402srv runs (the gateway) reads the store's revocation list
    again at most ``refresh_seconds`` after it last did, so a revocation made
    on any instance is refused everywhere within that time. ``publish``
    serves the list at ``/.well-known/x402srv-revocations.json`` for verifiers
    that only hold the public keys (``x402srv.tokens.revocation.RevocationList``).
    """

    refresh_seconds: float = Field(default=5.0, ge=0.1, le=3600)
    publish: bool = True


class CountersConfig(_Model):
    """``[analytics]``: the counts behind the console's charts (``x402srv.usage.counters``)."""

    flush_seconds: float = Field(default=5.0, ge=0.05, le=300)
    keep_days: float = Field(default=400.0, ge=1, le=3650)
