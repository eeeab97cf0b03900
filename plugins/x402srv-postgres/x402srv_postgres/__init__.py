"""x402srv-postgres: the ``postgres`` store, a durable ledger several x402srv instances share.

Installed, it registers the store ``postgres`` through the ``x402srv``
entry-point group; a config selects it with ``[store] backend = "postgres"``
and ``[store.postgres] dsn = { env = "X402SRV_POSTGRES_DSN" }``. Create or
upgrade its tables with ``x402srv migrate --config FILE``.
"""

from .options import PostgresOptions
from .plugin import build_postgres_store
from .store import PostgresStore

__all__ = ["PostgresOptions", "PostgresStore", "build_postgres_store"]
