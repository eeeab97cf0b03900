"""pytest fixtures: PostgreSQL clusters that tests start themselves (``testing.PostgresServer``).

Loaded by the repository's root ``conftest.py`` when this plugin is installed,
so the plugin's tests and the core's end-to-end tests share them:

- ``start_postgres(**kwargs)``: a new cluster (password, TLS, settings ...),
  stopped and deleted at the end of the session, with its standbys;
- ``postgres_tls_files()``: a throw-away CA and certificates, deleted at the end of
  the session (they hold private keys);
- ``postgres_server``: one plain cluster for the session;
- ``postgres_schema``: a fresh schema name per test, so tests sharing the
  cluster never see each other's rows (as sellers sharing a database);
- ``postgres_store_table``: the ``[store]`` table of a seller config on the
  session's cluster, with a fresh schema already migrated.

Without the PostgreSQL binaries these fixtures skip the tests that use them.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .testing import (
    PostgresServer,
    TlsFiles,
    discard_template,
    make_tls_files,
    migrate_schema,
    postgres_bin_dir,
)

__all__ = [
    "StartPostgres",
    "postgres_schema",
    "postgres_server",
    "postgres_store_table",
    "postgres_tls_files",
    "start_postgres",
]

#: ``start_postgres(password=None, tls=None, client_certificates=False, settings={})``.
StartPostgres = Callable[..., PostgresServer]


@pytest.fixture(scope="session")
def start_postgres() -> Iterator[StartPostgres]:
    if postgres_bin_dir() is None:
        pytest.skip("PostgreSQL is not installed (set X402SRV_POSTGRES_BIN to its bin directory)")
    started: list[PostgresServer] = []

    def start(**kwargs: Any) -> PostgresServer:
        server = PostgresServer(**kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in reversed(started):
        server.cleanup()
    discard_template()


@pytest.fixture(scope="session")
def postgres_tls_files() -> Iterator[Callable[[], TlsFiles]]:
    """``postgres_tls_files()``: ``make_tls_files()``, deleted at the end of the session."""
    made: list[Path] = []

    def make() -> TlsFiles:
        files = make_tls_files()
        made.append(files.ca.parent)
        return files

    yield make
    for directory in made:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server(start_postgres: StartPostgres) -> PostgresServer:
    return start_postgres()


@pytest.fixture
def postgres_schema() -> str:
    return f"test_{secrets.token_hex(6)}"


@pytest.fixture
def postgres_store_table(postgres_server: PostgresServer, postgres_schema: str) -> dict[str, Any]:
    """``{"backend": "postgres", "postgres": {...}}`` for ``seller_config(store=...)``.

    Its pool waits up to 30 s for a connection (the default is 2 s): the tests that race
    200 calls at a seller are about which calls win, and on a loaded machine the queue for
    the pool's 10 connections can take longer than the default allows.
    """
    migrate_schema(postgres_server.dsn(), postgres_schema)
    return {
        "backend": "postgres",
        "postgres": {
            "dsn": postgres_server.dsn(),
            "schema": postgres_schema,
            "pool_timeout_seconds": 30,
        },
    }
