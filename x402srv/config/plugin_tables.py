"""The sections that choose a plugin by name: ``[store]``, ``[settlement]``, ``[credentials]``.

Each names its plugin (``backend``, ``strategy``, ``issuer``) and may carry
option tables for plugins (``[store.redis]``): the core keeps those tables
opaque, hands each to its plugin, and redacts whatever looks like a secret or
a URL when the config is shown (``x402srv check``). ``x402srv.config.models``
assembles them into ``Config``; ``x402srv.config.ignored_keys`` judges which
of their keys the chosen plugins would never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from x402srv.config.fields import StrictModel
from x402srv.config.networks import SettlerConfig
from x402srv.config.secrets import HttpUrlSecret, SecretValue, redact_url, url_secret

__all__ = [
    "BreakerConfig",
    "CredentialsConfig",
    "PluginTables",
    "PreviousKey",
    "SettlementConfig",
    "StoreConfig",
]


class PluginTables(StrictModel):
    """A section whose extra keys are option tables of plugins (``[store.redis]``)."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    @model_validator(mode="after")
    def _extra_keys_are_tables(self) -> PluginTables:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                # A leading "." asks _format_error to append the key to the section's path.
                raise ValueError(
                    f".{key}: unknown key (only plugin option tables may be added here)"
                )
        return self

    def __repr_args__(self) -> Any:
        extra = self.model_extra or {}
        for name, value in super().__repr_args__():
            yield name, ("<plugin options>" if name in extra else value)

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self.model_extra or {}:
            if isinstance(data, dict) and isinstance(data.get(name), dict):
                data[name] = _redact_options(data[name])
        return data

    def plugin_options(self, name: str) -> dict[str, Any]:
        value = (self.model_extra or {}).get(name)
        return dict(value) if isinstance(value, dict) else {}

    def plugin_tables(self) -> list[str]:
        return sorted(self.model_extra or {})


class StoreConfig(PluginTables):
    backend: str = "sqlite"
    path: str = "x402srv.db"
    url: (
        Annotated[
            SecretValue,
            url_secret("redis", "rediss", "unix", hosts_listed=("redis+sentinel",)),
        ]
        | None
    ) = None


class BreakerConfig(StrictModel):
    """``[settlement.circuit_breaker]``: when a network's failover skips a failing settler.

    Per settler and per worker process: ``failures`` definite failures in a row
    open it; it is skipped for ``cooldown_seconds``; then one request probes it
    (a probe that never reports back frees its slot after ``probe_timeout_seconds``).
    Only networks with more than one settler have breakers.
    """

    failures: int = Field(default=3, ge=1, le=1000)
    cooldown_seconds: float = Field(default=30.0, gt=0, le=86_400)
    probe_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)


class SettlementConfig(PluginTables):
    strategy: str | None = None
    facilitator_url: HttpUrlSecret | None = None
    facilitator_auth: SecretValue | None = None
    gas_wallet_private_key: SecretValue | None = None
    rpc_url: HttpUrlSecret | None = None
    lease_seconds: int = Field(default=120, ge=5, le=3600)
    circuit_breaker: BreakerConfig = BreakerConfig()

    @property
    def selected_strategy(self) -> str:
        """A gas wallet key without a strategy selects ``gas-wallet`` (docs/protocol/config.md)."""
        if self.strategy:
            return self.strategy
        return "gas-wallet" if self.gas_wallet_private_key else "facilitator"

    def as_settler(self) -> SettlerConfig:
        """``[settlement]`` as the settler of a network that names none of its own."""
        strategy = self.selected_strategy
        facilitator = strategy == "facilitator"  # (the one-network form let both be given)
        return SettlerConfig(
            strategy=strategy,
            facilitator_url=self.facilitator_url if facilitator else None,
            facilitator_auth=self.facilitator_auth if facilitator else None,
            # A facilitator never reads the key (a [[networks.settlers]] gas wallet may).
            gas_wallet_private_key=None if facilitator else self.gas_wallet_private_key,
        )


class PreviousKey(StrictModel):
    """A retired signing key that still verifies tokens it signed (rotation)."""

    key: SecretValue
    kid: str | None = Field(default=None, min_length=1, max_length=128)


def _previous_key(value: Any) -> Any:
    # A bare secret (string, {env}, {file}) is a key with a derived kid.
    if isinstance(value, str) or (isinstance(value, dict) and set(value) <= {"env", "file"}):
        return {"key": value}
    return value


class CredentialsConfig(PluginTables):
    issuer: str = "jwt"
    secret: SecretValue | None = None
    algorithm: Literal["HS256", "EdDSA"] = "HS256"
    private_key: SecretValue | None = None
    audience: str | None = None
    kid: str | None = Field(default=None, min_length=1, max_length=128)
    callback: str | None = None
    callback_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    previous_keys: list[Annotated[PreviousKey, BeforeValidator(_previous_key)]] = Field(
        default_factory=list, max_length=16
    )


_SECRET_KEY = re.compile(r"url|password|secret|key|token|auth", re.IGNORECASE)


def _redact_value(key: str, value: Any) -> Any:
    if isinstance(value, dict) and len(value) == 1 and ("env" in value or "file" in value):
        kind, name = next(iter(value.items()))
        return f"<secret: {kind} {name}>"
    if isinstance(value, dict):
        return _redact_options(value)
    if isinstance(value, list):
        return [_redact_value(key, item) for item in value]
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    if isinstance(value, str) and _SECRET_KEY.search(key):
        return "<redacted>"
    return value


def _redact_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Plugin tables are opaque to the core: hide whatever looks like a secret or a URL."""
    return {key: _redact_value(key, value) for key, value in options.items()}
