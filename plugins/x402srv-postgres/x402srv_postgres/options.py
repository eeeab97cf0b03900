"""``[store.postgres]``: where the ledger lives, how to reach it, and how long to wait.

The DSN is a secret (it usually holds a password), so it takes the same forms
as every secret of the config: a string, ``{ env = "NAME" }`` or
``{ file = "path" }``, and it is never shown (``x402srv check`` prints
``<secret: env NAME>``). Several hosts in one DSN
(``postgresql://u@db1:5432,db2:5432/x402srv?target_session_attrs=read-write``)
let the store follow a primary switch by itself (README, "Failover").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from x402srv.plugin import PluginOptions, Secret, SecretValue

__all__ = ["SCHEMES", "PostgresOptions", "SslMode", "SynchronousCommit"]

#: What libpq calls the TLS modes; ``None`` (unset) leaves it to the DSN (libpq's "prefer").
SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]

#: ``synchronous_commit`` as PostgreSQL spells it.
SynchronousCommit = Literal["on", "off", "local", "remote_write", "remote_apply"]

SCHEMES = ("postgresql", "postgres")

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresOptions(PluginOptions):
    """Validated options; the defaults suit a PostgreSQL on the same network as x402srv."""

    model_config = ConfigDict(populate_by_name=True)

    dsn: SecretValue
    """``postgresql://user:password@host:5432/database?...``, one host or several."""

    schema_name: str = Field(default="x402srv", alias="schema")
    """The PostgreSQL schema (namespace) of the tables; one per seller sharing a database."""

    pool_size: int = Field(default=10, ge=1, le=1000)
    """Connections per worker process at most; a request waits ``pool_timeout_seconds`` for one."""

    pool_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    """How long a request waits for a free pooled connection before answering 503."""

    connect_timeout_seconds: float = Field(default=3.0, gt=0, le=60)
    """Per connection attempt (per host of a multi-host DSN)."""

    statement_timeout_ms: int = Field(default=5000, ge=100, le=600_000)
    """The server cancels a statement that runs longer (``statement_timeout``); the request
    answers 503. The client gives up one second later if the server does not answer at all."""

    synchronous_commit: SynchronousCommit | None = None
    """When PostgreSQL acknowledges a commit (unset: the server's setting, ``on`` by default).

    ``on`` waits for the WAL flush (and a synchronous standby's); ``remote_apply``
    also until the standby applied it. ``off`` acknowledges before the flush:
    a crash of the database server or its host may lose the last ~0.6 s of
    writes, claims included, which is the durability of sqlite's default
    ``synchronous = NORMAL`` (README, "Durability")."""

    sslmode: SslMode | None = None
    """TLS as libpq spells it; ``verify-full`` checks the certificate and the host name."""

    sslrootcert: Path | None = Field(default=None, strict=False)  # TOML gives a string
    """The CA that signed the server's certificate; unset: the system's trust store."""

    sslcert: Path | None = Field(default=None, strict=False)  # TOML gives a string
    """A client certificate, for servers that authenticate clients by certificate."""

    sslkey: Path | None = Field(default=None, strict=False)  # TOML gives a string
    """The client certificate's private key (unencrypted, readable by x402srv only)."""

    @field_validator("dsn")
    @classmethod
    def _postgres_url(cls, value: Secret) -> Secret:
        scheme, sep, rest = value.reveal().partition("://")
        if not sep or scheme not in SCHEMES or not rest.strip("/"):
            raise ValueError(
                "must be a postgresql:// URL, e.g. postgresql://user:password@host:5432/database "
                "(value not shown)"
            )
        return value

    @field_validator("schema_name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _IDENTIFIER.fullmatch(value) or value.startswith("pg_"):
            raise ValueError(
                "must be a lowercase identifier ([a-z_][a-z0-9_]*, at most 63, not pg_...)"
            )
        return value

    @field_validator("sslrootcert", "sslcert", "sslkey")
    @classmethod
    def _readable_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        if not value.is_absolute():
            value = Path((info.context or {}).get("base_dir", ".")) / value
        if not value.is_file():
            raise ValueError(f"{value} is not a readable file")
        return value

    @model_validator(mode="after")
    def _consistent_tls(self) -> PostgresOptions:
        if (self.sslcert is None) != (self.sslkey is None):
            raise ValueError("sslcert and sslkey go together (a client certificate and its key)")
        uses_files = self.sslrootcert or self.sslcert
        if uses_files and self.sslmode in (None, "disable", "allow", "prefer"):
            raise ValueError(
                "sslrootcert/sslcert need sslmode = require, verify-ca or verify-full "
                "(otherwise the connection may not use TLS at all)"
            )
        return self
