"""The plugin's tests share one cluster (``x402srv_postgres.fixtures``) and one migrated schema.

Migrating a schema costs a fifth of a second, so the contract's many small
tests do not each get one: ``migrated_schema`` is made once, and
``empty_schema`` deletes every row before a test. Tests that migrate, stop or
reconfigure a server start their own (``start_postgres``, ``postgres_schema``).
"""

from __future__ import annotations

import asyncpg
import pytest
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.testing import PostgresServer

from x402srv.plugin import Secret

TABLES = (
    "payment_claims",
    "tx_claims",
    "challenges",
    "leases",
    "tasks",
    "rate_counters",
    "counts",
    "refunds",
)


@pytest.fixture(scope="session")
async def migrated_schema(postgres_server: PostgresServer) -> str:
    options = PostgresOptions(dsn=Secret(postgres_server.dsn()), schema="contract")
    await PostgresStore(options.dsn, options).migrate()
    return options.schema_name


@pytest.fixture
async def empty_schema(postgres_server: PostgresServer, migrated_schema: str) -> str:
    conn = await asyncpg.connect(postgres_server.dsn())
    try:
        # DELETE, not TRUNCATE: a few rows go faster than new files for six tables.
        await conn.execute("".join(f"DELETE FROM {migrated_schema}.{t};" for t in TABLES))
    finally:
        await conn.close()
    return migrated_schema
