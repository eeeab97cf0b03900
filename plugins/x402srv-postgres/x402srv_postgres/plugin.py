"""Entry point ``postgres``: builds the store from ``[store.postgres]``.

Everything the TOML can get wrong fails here, before the server starts, with
its key path: no DSN, a DSN that is not a PostgreSQL URL, an option out of
range, TLS files that are missing or do not go together. Whether the server
accepts the credentials and whether the schema is current is checked when the
store starts (``PostgresStore.start``).
"""

from __future__ import annotations

from x402srv.plugin import ConfigError, PluginContext, Register, Store, hookimpl

from .connection import tls_context
from .options import PostgresOptions
from .store import PostgresStore

__all__ = ["build_postgres_store", "register_stores"]


def build_postgres_store(ctx: PluginContext) -> PostgresStore:
    """The factory ``[store] backend = "postgres"`` selects."""
    if ctx.config.store.url is not None:
        raise ConfigError(
            "the postgres store takes its DSN from [store.postgres] dsn, "
            '(e.g. dsn = { env = "X402SRV_POSTGRES_DSN" }); remove [store] url',
            path="store.url",
        )
    if "dsn" not in ctx.options:
        raise ConfigError(
            'required by the postgres store: "postgresql://user:password@host:5432/database" '
            'or { env = "NAME" } / { file = "path" }',
            path=f"{ctx.key_path}.dsn",
        )
    options = ctx.parse_options(PostgresOptions)
    tls_context(options)  # TLS files that do not load fail now, not in every worker
    return PostgresStore(options.dsn, options)


@hookimpl
def register_stores(register: Register[Store]) -> None:
    register("postgres", build_postgres_store)
