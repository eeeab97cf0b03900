"""What only a real PostgreSQL shows: credentials, TLS, timeouts, outages and their end.

Every test here that stops or reconfigures a server starts its own
(``start_postgres``), so the session's cluster stays clean for the contract.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import pytest
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import PostgresServer, TlsFiles, make_tls_files

from x402srv.plugin import ConfigError, Secret, StoreUnavailable, TransitionApplied
from x402srv.testing.builders import make_key, make_record
from x402srv.testing.store_contract import settling

PASSWORD = "pg-Secret-4-tests"


def _store(dsn: str, schema: str, **options: object) -> PostgresStore:
    parsed = PostgresOptions.model_validate({"dsn": Secret(dsn), "schema": schema, **options})
    return PostgresStore(parsed.dsn, parsed)


async def _ready(dsn: str, schema: str, **options: object) -> PostgresStore:
    store = _store(dsn, schema, **options)
    await store.migrate()
    await store.start()
    return store


def _assert_hidden(exc: BaseException, *secrets_: str) -> None:
    """What a client could see: a 503 problem with Retry-After, nothing chained, no secret."""
    assert isinstance(exc, StoreUnavailable)
    problem = exc.to_problem()
    assert (problem["status"], problem["code"]) == (503, "STORE_UNAVAILABLE")
    assert exc.headers()["Retry-After"] == "2"
    assert exc.__suppress_context__
    for secret in secrets_:
        assert secret not in str(problem)


@pytest.fixture(scope="module")
def password_server(start_postgres: StartPostgres) -> PostgresServer:
    return start_postgres(password=PASSWORD)


# ------------------------------------------------------------ credentials


async def test_the_right_password_connects_and_a_wrong_one_is_a_config_error(
    password_server: PostgresServer, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await _ready(password_server.dsn(), postgres_schema)
    await store.ping()
    await store.close()
    wrong = _store(password_server.dsn(password="not-" + PASSWORD), postgres_schema)
    with caplog.at_level(logging.DEBUG), pytest.raises(ConfigError) as caught:
        await wrong.start()
    assert "store.postgres.dsn" in str(caught.value)
    assert "InvalidPasswordError" in str(caught.value)
    everything = str(caught.value) + caplog.text
    assert PASSWORD not in everything
    with pytest.raises(ConfigError, match=r"store\.postgres\.dsn"):
        await wrong.migrate()


async def test_a_missing_database_is_a_config_error(
    postgres_server: PostgresServer, postgres_schema: str
) -> None:
    dsn = postgres_server.dsn().replace("/postgres", "/no_such_database")
    with pytest.raises(ConfigError, match="InvalidCatalogNameError"):
        await _store(dsn, postgres_schema).start()


# ------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls_server(
    start_postgres: StartPostgres, postgres_tls_files: Callable[[], TlsFiles]
) -> PostgresServer:
    return start_postgres(password=PASSWORD, tls=postgres_tls_files())


async def _uses_tls(store: PostgresStore) -> bool:
    """Whether the store's own connection is encrypted, as the server sees it."""
    return bool(
        await store._run(
            "tls?",
            lambda conn: conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"),
        )
    )


async def test_verify_full_checks_the_servers_certificate(
    tls_server: PostgresServer, postgres_schema: str, tmp_path: Path
) -> None:
    assert tls_server.tls is not None
    verified = {"sslmode": "verify-full", "sslrootcert": tls_server.tls.ca}
    store = await _ready(tls_server.dsn(), postgres_schema, **verified)
    assert await _uses_tls(store)
    await store.close()
    # A certificate from another CA fails the check: the seller's config, not an outage.
    stranger = make_tls_files(tmp_path / "stranger")  # read by x402srv only
    with pytest.raises(ConfigError, match="SSLCertVerificationError"):
        await _store(
            tls_server.dsn(), postgres_schema, sslmode="verify-full", sslrootcert=stranger.ca
        ).start()
    # The server refuses unencrypted connections (its pg_hba.conf), and says so.
    with pytest.raises(ConfigError, match=r"store\.postgres\.dsn"):
        await _store(tls_server.dsn(), postgres_schema, sslmode="disable").start()


async def test_require_encrypts_without_a_ca(
    tls_server: PostgresServer, postgres_schema: str
) -> None:
    store = await _ready(tls_server.dsn(), postgres_schema, sslmode="require")
    try:
        assert await _uses_tls(store)
    finally:
        await store.close()


async def test_a_client_certificate_replaces_the_password(
    start_postgres: StartPostgres,
    postgres_schema: str,
    postgres_tls_files: Callable[[], TlsFiles],
) -> None:
    tls = postgres_tls_files()
    server = start_postgres(tls=tls, client_certificates=True)
    certified = {
        "sslmode": "verify-full",
        "sslrootcert": tls.ca,
        "sslcert": tls.client_cert,
        "sslkey": tls.client_key,
    }
    store = await _ready(server.dsn(), postgres_schema, **certified)
    try:
        assert await _uses_tls(store)
    finally:
        await store.close()
    without = {"sslmode": "verify-full", "sslrootcert": tls.ca}
    with pytest.raises(ConfigError, match=r"store\.postgres\.dsn"):
        await _store(server.dsn(), postgres_schema, **without).start()


# ------------------------------------------------------------ timeouts


@pytest.fixture
async def locked(
    postgres_server: PostgresServer, postgres_schema: str
) -> AsyncIterator[tuple[PostgresStore, str]]:
    """A store, and one of its records locked by another session until the test ends."""
    store = await _ready(
        postgres_server.dsn(),
        postgres_schema,
        statement_timeout_ms=500,
        pool_size=1,
        pool_timeout_seconds=0.1,
    )
    record = make_record()
    await store.create_challenge(record)
    other = await asyncpg.connect(postgres_server.dsn())
    transaction = other.transaction()
    await transaction.start()
    await other.execute(
        f"SELECT 1 FROM {postgres_schema}.challenges WHERE challenge_id = $1 FOR UPDATE",
        record.challenge_id,
    )
    yield store, record.challenge_id
    await transaction.rollback()
    await other.close()
    await store.close()


async def test_a_statement_past_its_timeout_answers_503(
    locked: tuple[PostgresStore, str],
) -> None:
    store, challenge_id = locked
    record = await store.get_challenge(challenge_id)  # reads never wait for a lock
    assert record is not None
    with pytest.raises(StoreUnavailable) as caught:
        await store.transition(settling(record))
    _assert_hidden(caught.value)
    assert await store.get_challenge(challenge_id) == record


async def test_a_request_waits_for_a_pooled_connection_then_answers_503(
    locked: tuple[PostgresStore, str],
) -> None:
    store, challenge_id = locked
    record = await store.get_challenge(challenge_id)
    assert record is not None
    # The only connection waits for the lock; a second request waits for the connection.
    blocked = asyncio.create_task(store.transition(settling(record)))
    await asyncio.sleep(0.05)
    with pytest.raises(StoreUnavailable) as caught:
        await store.get_challenge(challenge_id)
    _assert_hidden(caught.value)
    with pytest.raises(StoreUnavailable):
        await blocked


# ------------------------------------------------------------ outages


async def test_a_restart_is_an_outage_that_ends_by_itself(
    start_postgres: StartPostgres, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_postgres(password=PASSWORD)
    store = await _ready(server.dsn(), postgres_schema, connect_timeout_seconds=1)
    try:
        record = make_record()
        await store.create_challenge(record)
        await asyncio.to_thread(server.stop)
        with caplog.at_level(logging.ERROR), pytest.raises(StoreUnavailable) as caught:
            await store.transition(settling(record))
        _assert_hidden(caught.value, PASSWORD)
        with pytest.raises(StoreUnavailable):
            await store.ping()
        await asyncio.to_thread(server.start)
        # The pooled connection died with the server: the first call after it is back works.
        moved = await store.transition(settling(record, make_key()))
        assert isinstance(moved, TransitionApplied)
        assert await store.get_challenge(record.challenge_id) == moved.record
        assert PASSWORD not in caplog.text
        assert "postgres store postgresql://127.0.0.1:" in caplog.text
    finally:
        await store.close()


async def test_a_server_down_at_start_only_warns(
    start_postgres: StartPostgres, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_postgres()
    first = await _ready(server.dsn(), postgres_schema)
    await first.close()
    await asyncio.to_thread(server.stop)
    store = _store(server.dsn(), postgres_schema, connect_timeout_seconds=1)
    with caplog.at_level(logging.WARNING):
        await store.start()
    assert "unreachable at start" in caplog.text
    try:
        with pytest.raises(StoreUnavailable):
            await store.get_challenge("anything")
        await asyncio.to_thread(server.start)
        await store.ping()  # checks the schema on its first connection, then answers
        assert await store.get_challenge("anything") is None
    finally:
        await store.close()


async def test_a_closed_store_answers_503(
    postgres_server: PostgresServer, postgres_schema: str
) -> None:
    store = await _ready(postgres_server.dsn(), postgres_schema)
    await store.close()
    with pytest.raises(StoreUnavailable):
        await store.get_challenge("anything")
    await store.close()  # twice is fine


async def test_synchronous_commit_is_set_per_connection(
    postgres_server: PostgresServer, postgres_schema: str
) -> None:
    async def setting(store: PostgresStore) -> str:
        return str(await store._run("show", lambda c: c.fetchval("SHOW synchronous_commit")))

    default = await _ready(postgres_server.dsn(), postgres_schema)
    relaxed = await _ready(postgres_server.dsn(), postgres_schema, synchronous_commit="off")
    try:
        assert (await setting(default), await setting(relaxed)) == ("on", "off")
    finally:
        await default.close()
        await relaxed.close()
