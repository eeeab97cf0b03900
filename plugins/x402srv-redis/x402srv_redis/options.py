"""``[store.redis]``: how the Redis store connects and how long it keeps records.

The URL is not here on purpose: it is the core's ``[store] url``, a secret
(``redis://``, ``rediss://`` or ``unix://``, password included), so ``x402srv
check`` and every log line redact it like the other secrets.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from x402srv.plugin import PluginOptions

__all__ = ["DAY", "RedisOptions"]

DAY = 86_400


class RedisOptions(PluginOptions):
    """Validated options; the defaults suit a Redis on the same network as x402srv."""

    key_prefix: str = Field(default="x402srv:", min_length=1, max_length=100)
    """Put in front of every key, so one Redis can serve several sellers (or tests)."""

    max_connections: int = Field(default=32, ge=1, le=10_000)
    """Connections per worker process; a request waits ``pool_timeout_seconds`` for one."""

    pool_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    """How long a request waits for a free pooled connection before answering 503."""

    socket_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    """Per-command timeout; every command is one short script, so seconds are plenty."""

    connect_timeout_seconds: float = Field(default=2.0, gt=0, le=60)

    record_ttl_seconds: int = Field(default=30 * DAY, ge=60, le=3650 * DAY)
    """Expiry of a record and its claims, renewed on every write of the record.

    It must outlive the authorization's ``validBefore`` (a claim that expired
    while its authorization can still be submitted could let the payment be
    attempted twice) and the grant's lifetime (replays fetch the grant). The
    plugin refuses values shorter than the longest plan ``token_ttl_seconds``
    plus ``server.max_timeout_seconds`` plus ``server.challenge_ttl_seconds``.
    """

    wait_replicas: int = Field(default=0, ge=0, le=64)
    """Replicas every write must reach before it counts as done (``WAIT``, see ``replicas``);
    0 sends no ``WAIT``. Fewer in time: the request answers 503."""

    wait_timeout_seconds: float = Field(default=1.0, gt=0, le=30)
    """How long a write waits for ``wait_replicas`` confirmations (below the socket timeout)."""

    require_durable: bool = False
    """Refuse to start unless the server keeps every acknowledged write through a crash
    (``appendonly yes`` with ``appendfsync always``), or when that cannot be checked;
    without it such a server only gets a warning at start-up (``durability``)."""

    tls_ca_file: Path | None = Field(default=None, strict=False)  # TOML gives a string
    """``rediss://`` only: the CA that signed the server's certificate (relative to the
    config file); unset means the system's trust store."""

    @model_validator(mode="after")
    def _wait_only_with_replicas(self) -> RedisOptions:
        if "wait_timeout_seconds" in self.model_fields_set and not self.wait_replicas:
            raise ValueError(
                ".wait_timeout_seconds: ignored, because wait_replicas is 0 (no write waits "
                "for replicas); set wait_replicas or remove it"
            )
        return self

    @model_validator(mode="after")
    def _wait_inside_the_socket_timeout(self) -> RedisOptions:
        if self.wait_replicas and self.wait_timeout_seconds >= self.socket_timeout_seconds:
            raise ValueError(
                ".wait_timeout_seconds: must be below socket_timeout_seconds: the reply to a "
                "write that waits for replicas comes only after the wait"
            )
        return self

    @field_validator("key_prefix")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable() or any(c.isspace() for c in value):
            raise ValueError("must be printable and contain no whitespace")
        return value

    @field_validator("tls_ca_file")
    @classmethod
    def _relative_to_config(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None or value.is_absolute():
            return value
        base = Path((info.context or {}).get("base_dir", "."))
        return base / value
