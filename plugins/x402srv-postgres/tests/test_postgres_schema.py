"""The schema: created and upgraded only by ``x402srv migrate``, checked when a store starts."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import asyncpg
import pytest
from x402srv_postgres import PostgresOptions, PostgresStore, schema
from x402srv_postgres.schema import Migration
from x402srv_postgres.testing import PostgresServer

from x402srv.plugin import ConfigError, Secret
from x402srv.testing import launcher, toml
from x402srv.testing.builders import make_record

DSN_ENV = "X402SRV_TEST_POSTGRES_DSN"
SHIPPED = schema.migrations()
LATEST = SHIPPED[-1].version


def _applied(name: str, steps: tuple[Migration, ...] = SHIPPED) -> list[str]:
    """What ``migrate`` prints for ``steps`` applied to schema ``name``."""
    return [f"{name}: applied {step.version:04d}_{step.name}" for step in steps]


def _store(server: PostgresServer, name: str) -> PostgresStore:
    options = PostgresOptions(dsn=Secret(server.dsn()), schema=name)
    return PostgresStore(options.dsn, options)


async def _versions(server: PostgresServer, name: str) -> list[int]:
    conn = await asyncpg.connect(server.dsn())
    try:
        if await conn.fetchval("SELECT to_regclass($1)", f"{name}.schema_version") is None:
            return []
        rows = await conn.fetch(f"SELECT version FROM {name}.schema_version ORDER BY version")
        return [row["version"] for row in rows]
    finally:
        await conn.close()


def _cli(config: Path, server: PostgresServer, *args: str) -> subprocess.CompletedProcess[str]:
    return launcher.run(
        [*args, "--config", str(config)],
        cwd=os.getcwd(),
        env={**os.environ, DSN_ENV: server.dsn()},
        timeout=60,
    )


def _seller_toml(tmp_path: Path, schema_name: str) -> Path:
    document = {
        "seller": {
            "agent_name": "Weather Oracle",
            "agent_description": "Paid hourly weather data",
            "agent_url": "https://api.example.com",
            "provider_name": "Example Inc",
            "provider_url": "https://example.com",
            "wallet_address": "0x" + "11" * 20,
            "network": "base-sepolia",
        },
        "plans": [{"plan_id": "hourly", "unit_amount": "$0.10", "description": "An hour"}],
        "credentials": {"secret": "s" * 32},
        "store": {
            "backend": "postgres",
            "postgres": {"dsn": {"env": DSN_ENV}, "schema": schema_name},
        },
    }
    path = tmp_path / "seller.toml"
    path.write_text(toml.dumps(document))
    return path


async def test_a_store_never_creates_its_schema(
    postgres_server: PostgresServer, postgres_schema: str
) -> None:
    store = _store(postgres_server, postgres_schema)
    with pytest.raises(ConfigError) as caught:
        await store.start()
    message = str(caught.value)
    assert f'schema "{postgres_schema}" has no x402srv tables' in message
    assert "x402srv migrate --config FILE" in message
    assert await _versions(postgres_server, postgres_schema) == []
    await store.close()


def test_x402srv_migrate_creates_the_schema_once(
    postgres_server: PostgresServer, postgres_schema: str, tmp_path: Path
) -> None:
    config = _seller_toml(tmp_path, postgres_schema)
    refused = _cli(config, postgres_server, "reconcile")
    assert refused.returncode == 2, refused.stderr
    assert "x402srv migrate --config FILE" in refused.stderr
    first = _cli(config, postgres_server, "migrate")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == _applied(postgres_schema)
    again = _cli(config, postgres_server, "migrate")
    assert (again.returncode, again.stdout) == (0, "")
    assert "nothing applied" in again.stderr
    assert postgres_server.dsn() not in first.stdout + first.stderr + refused.stderr
    assert asyncio.run(_versions(postgres_server, postgres_schema)) == list(range(1, LATEST + 1))


async def test_an_older_schema_is_refused_until_migrated(
    postgres_server: PostgresServer, postgres_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that adds a step: its servers refuse the old schema, ``migrate`` fixes it."""
    first = _store(postgres_server, postgres_schema)
    assert await first.migrate() == _applied(postgres_schema)
    await first.start()
    record = make_record()
    await first.create_challenge(record)
    await first.close()

    later = Migration(LATEST + 1, "note", "ALTER TABLE challenges ADD COLUMN note text")
    monkeypatch.setattr(schema, "migrations", lambda: (*SHIPPED, later))
    upgraded = _store(postgres_server, postgres_schema)
    too_old = f"is at version {LATEST}; this x402srv-postgres needs version {LATEST + 1}"
    with pytest.raises(ConfigError, match=too_old):
        await upgraded.start()
    assert await upgraded.migrate() == _applied(postgres_schema, (later,))
    await upgraded.start()
    assert await upgraded.get_challenge(record.challenge_id) == record
    await upgraded.close()
    assert await _versions(postgres_server, postgres_schema) == list(range(1, LATEST + 2))

    # The release before it keeps serving on the newer schema (steps only add).
    monkeypatch.setattr(schema, "migrations", lambda: SHIPPED)
    older = _store(postgres_server, postgres_schema)
    await older.start()
    assert await older.get_challenge(record.challenge_id) == record
    await older.close()


async def test_concurrent_migrations_apply_each_step_once(
    postgres_server: PostgresServer, postgres_schema: str
) -> None:
    stores = [_store(postgres_server, postgres_schema) for _ in range(4)]
    results = await asyncio.gather(*(store.migrate() for store in stores))
    assert sorted(map(len, results)) == [0, 0, 0, LATEST]
    assert await _versions(postgres_server, postgres_schema) == list(range(1, LATEST + 1))
