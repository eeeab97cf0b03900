"""The pipeline's answer when PostgreSQL goes away between settling and recording.

Pinned by ``x402srv.testing.OutageContract``: its settler stops the real
server (``pg_ctl stop -m fast``: committed transactions stay) after the claim
is committed, before the outcome is recorded.
"""

from __future__ import annotations

import pytest
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import PostgresServer

from x402srv.plugin import Secret
from x402srv.testing import OutageContract


class TestPostgresOutage(OutageContract):
    @pytest.fixture(scope="class")
    @classmethod
    def store_server(cls, start_postgres: StartPostgres) -> PostgresServer:
        return start_postgres()

    @pytest.fixture
    async def outage_store(
        self, store_server: PostgresServer, postgres_schema: str
    ) -> PostgresStore:
        options = PostgresOptions(dsn=Secret(store_server.dsn()), schema=postgres_schema)
        store = PostgresStore(options.dsn, options)
        await store.migrate()
        return store
