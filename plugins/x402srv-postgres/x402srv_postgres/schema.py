"""The store's schema: versioned SQL files, applied only by ``x402srv migrate``.

``migrations/NNNN_name.sql`` are the steps, numbered from 1 without gaps; the
table ``<schema>.schema_version`` holds one row per step applied. ``migrate``
applies the missing steps in one transaction (all of them or none) under an
advisory lock, so two operators running it at once apply each step once.

A server never migrates: several instances may be running on the old schema,
and a deploy must choose when the schema changes. At start-up the store reads
the version; older than this code needs is a ``ConfigError`` that names the
command to run. Newer is accepted: steps only add (tables, columns, indexes,
functions), so an instance one release behind keeps working while a rolling
deploy replaces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

from x402srv.plugin import ConfigError

if TYPE_CHECKING:
    from .connection import Conn

__all__ = ["Migration", "current_version", "latest_version", "migrate", "migrations", "require"]

_FILE = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """Every step shipped with the plugin, in order (checked: 1, 2, 3 ... without gaps)."""
    found = []
    for entry in files("x402srv_postgres").joinpath("migrations").iterdir():
        match = _FILE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"x402srv_postgres migrations are not numbered 1..n: {found}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


async def current_version(conn: Conn, schema: str) -> int:
    """The schema's version; 0 when nothing was ever applied (no ``schema_version`` table)."""
    table = await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".schema_version')
    if table is None:
        return 0
    query = 'SELECT coalesce(max(version), 0) FROM "{schema}".schema_version'
    version = await conn.fetchval(query.replace("{schema}", schema))
    return int(version)


async def require(conn: Conn, schema: str) -> int:
    """Start-up's check: the schema is at least what this code needs, or a ``ConfigError``."""
    version = await current_version(conn, schema)
    needed = latest_version()
    if version < needed:
        state = "has no x402srv tables" if version == 0 else f"is at version {version}"
        raise ConfigError(
            f'the PostgreSQL schema "{schema}" {state}; this x402srv-postgres needs version '
            f"{needed}. Run `x402srv migrate --config FILE` first (a server never changes the "
            "schema by itself: other instances may be using it)",
            path="store.postgres",
        )
    return version


async def migrate(conn: Conn, schema: str) -> list[str]:
    """Apply the missing steps in one transaction; one line per step applied."""
    applied: list[str] = []
    async with conn.transaction():
        # Serializes concurrent `x402srv migrate` runs on this schema.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"x402srv:{schema}")
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        await conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".schema_version ('
            "version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        version = await current_version(conn, schema)
        await conn.execute(f'SET LOCAL search_path TO "{schema}"')
        for step in migrations():
            if step.version <= version:
                continue
            await conn.execute(step.sql)
            await conn.execute(
                "INSERT INTO schema_version (version, name) VALUES ($1, $2)",
                step.version,
                step.name,
            )
            applied.append(f"{schema}: applied {step.version:04d}_{step.name}")
    return applied
