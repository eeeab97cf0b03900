"""The PostgreSQL store runs the store contract against a real cluster the tests start."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.testing import PostgresServer

from x402srv.plugin import Secret, Store
from x402srv.testing import StoreContract


class TestPostgresStore(StoreContract):
    durable = True

    @pytest.fixture
    async def store(
        self, postgres_server: PostgresServer, empty_schema: str
    ) -> AsyncIterator[PostgresStore]:
        # The contract's races queue 100 calls per store on its 10 connections: on a loaded
        # machine (CI, two test workers) that wait can pass the 2 s default and the calls get
        # 503s. These tests are about outcomes; the pool's own timeout has tests of its own.
        options = PostgresOptions(
            dsn=Secret(postgres_server.dsn()), schema=empty_schema, pool_timeout_seconds=30
        )
        store = PostgresStore(options.dsn, options)
        await store.start()
        yield store
        await store.close()

    def another_store(self, store: Store) -> Store:
        assert isinstance(store, PostgresStore)
        return PostgresStore(store.dsn, store.options)

    def fresh_store(self, store: Store) -> Store:
        assert isinstance(store, PostgresStore)
        options = store.options.model_copy(update={"schema_name": f"fresh_{secrets.token_hex(6)}"})
        return PostgresStore(options.dsn, options)
