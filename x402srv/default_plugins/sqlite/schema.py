"""Opening the sqlite file: journal mode, pragmas and the schema version.

The tables keep each record's JSON (``ChallengeRecord.to_dict``) beside the
few columns that are looked up or sorted on, so a new record field needs no
migration; a new indexed column does, and bumps ``SCHEMA_VERSION``
(``PRAGMA user_version``). A file written by a newer x402srv is refused
rather than half understood.

Claims are tables of their own whose primary key *is* the claim: the database,
not a read-then-write in Python, guarantees one owner per payment and txHash.

Versions: 1 the challenges, claims and leases; 2 indexes the claims by
challenge (``prune`` deletes a record's claims with it) and adds the A2A
``tasks`` table; 3 puts ``challenge_id`` at the end of both listing indexes
(a cursor page is then one range of an index, no sort), gives tasks a
``prune_after`` time with a partial index for ``prune_tasks``, and adds the
shared hit counters ``rate_counters`` with an index on their window's end;
4 adds the grants' credit accounts (``credits``, the account's JSON beside
its ``keep_until``) and the keys credited to each (``credit_entries``, whose
unique ``(grant_id, key)`` is what makes a credit count once); 5 files each
record under its payer (``payer``, lowercase, with a partial index ending in
``(updated_at, challenge_id)`` for the console's newest-first search;
existing rows get theirs from their JSON) and adds the counters
``counts``, keyed by time bucket and name; 6 adds ``refunds``; 7 moves each
grant's used calls (calls charged by use) out of its account's JSON into
``used_calls``, a row per call indexed by ``(grant_id, seq)``, so a spend
reads and writes a small account and a settle adds one row. Each step runs in the one
transaction that sets the version, so a file is at one version or the next,
never in between.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Literal

from x402srv.errors import ConfigError

__all__ = ["SCHEMA_VERSION", "StoreConnection", "Synchronous", "connect"]

SCHEMA_VERSION = 7

Synchronous = Literal["NORMAL", "FULL"]

_SCHEMA_V1 = (
    """CREATE TABLE challenges (
        challenge_id TEXT PRIMARY KEY NOT NULL,
        request_id TEXT NOT NULL UNIQUE,
        state TEXT NOT NULL,
        updated_at REAL NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX challenges_by_updated ON challenges (updated_at)",
    "CREATE INDEX challenges_by_state ON challenges (state, updated_at)",
    """CREATE TABLE payment_claims (
        payment_key TEXT PRIMARY KEY NOT NULL,
        challenge_id TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE tx_claims (
        tx_hash TEXT PRIMARY KEY NOT NULL,
        challenge_id TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE leases (
        name TEXT PRIMARY KEY NOT NULL,
        holder TEXT NOT NULL,
        fence INTEGER NOT NULL,
        expires_at REAL NOT NULL,
        released INTEGER NOT NULL,
        value TEXT
    ) WITHOUT ROWID""",
)

_SCHEMA_V2 = (
    "CREATE INDEX payment_claims_by_challenge ON payment_claims (challenge_id)",
    "CREATE INDEX tx_claims_by_challenge ON tx_claims (challenge_id)",
    """CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY NOT NULL,
        version INTEGER NOT NULL,
        document TEXT NOT NULL
    )""",
)

_SCHEMA_V3 = (
    "DROP INDEX challenges_by_updated",
    "CREATE INDEX challenges_by_updated ON challenges (updated_at, challenge_id)",
    "DROP INDEX challenges_by_state",
    "CREATE INDEX challenges_by_state ON challenges (state, updated_at, challenge_id)",
    "ALTER TABLE tasks ADD COLUMN prune_after REAL",
    "CREATE INDEX tasks_by_prune_after ON tasks (prune_after) WHERE prune_after IS NOT NULL",
    """CREATE TABLE rate_counters (
        key TEXT PRIMARY KEY NOT NULL,
        window_end REAL NOT NULL,
        hits INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX rate_counters_by_window_end ON rate_counters (window_end)",
)

_SCHEMA_V4 = (
    """CREATE TABLE credits (
        grant_id TEXT PRIMARY KEY NOT NULL,
        keep_until REAL NOT NULL,
        account TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX credits_by_keep_until ON credits (keep_until)",
    """CREATE TABLE credit_entries (
        seq INTEGER PRIMARY KEY,
        grant_id TEXT NOT NULL,
        key TEXT NOT NULL,
        amount INTEGER NOT NULL,
        at REAL NOT NULL,
        UNIQUE (grant_id, key)
    )""",
)

_SCHEMA_V5 = (
    "ALTER TABLE challenges ADD COLUMN payer TEXT",
    """UPDATE challenges SET payer = lower(coalesce(
        json_extract(record, '$.payer'), json_extract(record, '$.payment.payer')))""",
    """CREATE INDEX challenges_by_payer ON challenges (payer, updated_at, challenge_id)
        WHERE payer IS NOT NULL""",
    """CREATE TABLE counts (
        bucket INTEGER NOT NULL,
        name TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (bucket, name)
    ) WITHOUT ROWID""",
)

#: Refunds (docs/refunds.md): the record's JSON, with the columns the claim and listings read.
_SCHEMA_V6 = (
    """CREATE TABLE refunds (
        refund_id TEXT PRIMARY KEY,
        purchase_id TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        record TEXT NOT NULL
    )""",
    "CREATE INDEX refunds_by_purchase ON refunds (purchase_id)",
    "CREATE INDEX refunds_by_created ON refunds (created_at, refund_id)",
    "CREATE INDEX refunds_by_state ON refunds (state, created_at, refund_id)",
)

#: Used calls (docs/selling-calls.md, "Charging by use"): a row each, oldest first by
#: ``seq``; those already in an account's JSON move here in the same order.
_SCHEMA_V7 = (
    """CREATE TABLE used_calls (
        seq INTEGER PRIMARY KEY,
        grant_id TEXT NOT NULL,
        at REAL NOT NULL,
        route TEXT NOT NULL,
        reserved INTEGER NOT NULL,
        charged INTEGER NOT NULL
    )""",
    "CREATE INDEX used_calls_by_grant ON used_calls (grant_id, seq)",
    """INSERT INTO used_calls (grant_id, at, route, reserved, charged)
        SELECT c.grant_id, json_extract(u.value, '$[0]'), json_extract(u.value, '$[1]'),
            json_extract(u.value, '$[2]'), json_extract(u.value, '$[3]')
        FROM credits AS c, json_each(c.account, '$.used_calls') AS u
        ORDER BY c.grant_id, u.key DESC""",
    """UPDATE credits SET account = json_remove(account, '$.used_calls')
        WHERE json_type(account, '$.used_calls') IS NOT NULL""",
)

#: The statements that bring a file from version ``n - 1`` to ``n``.
_MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, _SCHEMA_V1),
    (2, _SCHEMA_V2),
    (3, _SCHEMA_V3),
    (4, _SCHEMA_V4),
    (5, _SCHEMA_V5),
    (6, _SCHEMA_V6),
    (7, _SCHEMA_V7),
)


class StoreConnection(sqlite3.Connection):
    """A connection that remembers its busy timeout (``ops`` waits for the lock itself)."""

    busy_timeout_ms: int = 0


def connect(
    path: Path,
    *,
    synchronous: Synchronous,
    busy_timeout_ms: int,
    autocheckpoint_pages: int = 1000,
    check_same_thread: bool = True,
) -> StoreConnection:
    """A connection ready for the store: WAL, busy timeout, current schema.

    ``autocheckpoint_pages`` is the WAL size at which a commit on this
    connection checkpoints by itself (sqlite's default 1000); the store raises
    it because a thread of its own checkpoints (``checkpoint``).

    ``isolation_level=None`` turns off the sqlite3 module's implicit
    transactions; the store issues ``BEGIN IMMEDIATE`` itself wherever it reads
    and then writes, so the write lock is taken before the read and a
    concurrent writer in another process makes it wait instead of failing.
    ``check_same_thread=False``: a connection opened on one thread and used on
    another (the store's inline connection, used only by its event loop).
    """
    conn = sqlite3.connect(
        path,
        timeout=busy_timeout_ms / 1000,
        isolation_level=None,
        cached_statements=64,
        factory=StoreConnection,
        check_same_thread=check_same_thread,
    )
    conn.busy_timeout_ms = busy_timeout_ms
    try:
        _use_wal(conn, busy_timeout_ms)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {int(autocheckpoint_pages)}")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _use_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> None:
    """Switch to WAL (kept in the file); readers then never block the writer.

    While another process switches a new file at the same moment, sqlite can
    answer SQLITE_BUSY at once instead of running the busy handler, so workers
    starting together retry here for up to the busy timeout.
    """
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            mode = _journal_mode(conn, "PRAGMA journal_mode")
            if mode != "wal":
                mode = _journal_mode(conn, "PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    if mode != "wal":
        raise sqlite3.OperationalError(f"the file system refuses WAL (journal mode {mode})")


def _journal_mode(conn: sqlite3.Connection, pragma: str) -> str:
    row = conn.execute(pragma).fetchone()
    return str(row[0]).lower()


def _migrate(conn: sqlite3.Connection) -> None:
    if _user_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _user_version(conn)
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the database has schema version {version}, newer than this x402srv "
                f"understands ({SCHEMA_VERSION}); upgrade x402srv",
                path="store.path",
            )
        for target, statements in _MIGRATIONS:
            if version < target:
                for statement in statements:
                    conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _user_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])
