"""The sqlite store's operations, each one transaction on one connection.

These run on the store's own thread (``store``), never on the event
loop. Every read-then-write is wrapped in ``BEGIN IMMEDIATE``: the write lock
is taken before the read, so two processes cannot both see PENDING and both
move to SETTLING. A write that needs no prior read is a single autocommit
statement, which sqlite makes atomic on its own.
"""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from x402srv.access.records import ChallengeRecord, State
from x402srv.interfaces import Lease, PaymentClaimed, TransitionApplied, TransitionRequest
from x402srv.interfaces import TransitionResult as Result
from x402srv.stores.rules import (
    check_state,
    claim_conflict,
    claim_keys,
    decode_record,
    decode_task,
    encode_record,
    encode_task,
    key_to_release,
    payer_of,
    state_values,
    tx_claim_key,
)

__all__ = [
    "acquire_lease",
    "challenge_row",
    "count_hits",
    "create_challenge",
    "create_challenges",
    "get_by_payment",
    "get_by_request_id",
    "get_by_tx_hash",
    "get_challenge",
    "get_task",
    "held_lease",
    "immediate",
    "list_challenges",
    "listing_query",
    "ping",
    "prune",
    "prune_tasks",
    "release_lease",
    "save_task",
    "take_over_lease",
    "transition",
]

_INSERT_CHALLENGE = (
    "INSERT OR IGNORE INTO challenges "
    "(challenge_id, request_id, state, updated_at, payer, record) VALUES (?, ?, ?, ?, ?, ?)"
)
_BY_ID = "SELECT record FROM challenges WHERE challenge_id = ?"
_BY_REQUEST = "SELECT record FROM challenges WHERE request_id = ?"
_BY_PAYMENT = (
    "SELECT c.record FROM payment_claims AS p JOIN challenges AS c USING (challenge_id) "
    "WHERE p.payment_key = ?"
)
_BY_TX = (
    "SELECT c.record FROM tx_claims AS t JOIN challenges AS c USING (challenge_id) "
    "WHERE t.tx_hash = ?"
)
_PAYMENT_OWNER = "SELECT challenge_id FROM payment_claims WHERE payment_key = ?"
_TX_OWNER = "SELECT challenge_id FROM tx_claims WHERE tx_hash = ?"
_CLAIM_PAYMENT = "INSERT OR REPLACE INTO payment_claims (payment_key, challenge_id) VALUES (?, ?)"
_CLAIM_TX = "INSERT OR REPLACE INTO tx_claims (tx_hash, challenge_id) VALUES (?, ?)"
_RELEASE_PAYMENT = "DELETE FROM payment_claims WHERE payment_key = ? AND challenge_id = ?"
_UPDATE_CHALLENGE = (
    "UPDATE challenges SET state = ?, updated_at = ?, payer = ?, record = ? WHERE challenge_id = ?"
)
_DELETE_CHALLENGE = "DELETE FROM challenges WHERE challenge_id = ?"
_DELETE_PAYMENT_CLAIMS = "DELETE FROM payment_claims WHERE challenge_id = ?"
_DELETE_TX_CLAIMS = "DELETE FROM tx_claims WHERE challenge_id = ?"
_CREATE_TASK = (
    "INSERT OR IGNORE INTO tasks (task_id, version, document, prune_after) VALUES (?, 1, ?, ?)"
)
_REPLACE_TASK = (
    "UPDATE tasks SET version = version + 1, document = ?, prune_after = ? "
    "WHERE task_id = ? AND version = ?"
)
#: One statement, so a save racing it either lands first (and sets a new time) or finds
#: the task gone; the subquery reads the partial index ``tasks_by_prune_after``.
_PRUNE_TASKS = (
    "DELETE FROM tasks WHERE rowid IN "
    "(SELECT rowid FROM tasks WHERE prune_after < ? ORDER BY prune_after LIMIT ?)"
)
_TASK = "SELECT document, version FROM tasks WHERE task_id = ?"
#: Expired counters deleted per ``count_hits`` call at most: the call stays short when
#: a whole window's counters expire at once, and still outpaces the keys a call adds.
SWEEP_COUNTERS = 100
_SWEEP_COUNTERS = (
    "DELETE FROM rate_counters WHERE key IN "
    "(SELECT key FROM rate_counters WHERE window_end < ? LIMIT ?)"
)
#: Keys per UPSERT statement: bounds the statement cache and the bound parameters.
_COUNTERS_PER_STATEMENT = 200
_LEASE = "SELECT fence, expires_at, released, value FROM leases WHERE name = ?"
_TAKE_LEASE = (
    "INSERT OR REPLACE INTO leases (name, holder, fence, expires_at, released, value) "
    "VALUES (?, ?, ?, ?, 0, ?)"
)
_HELD_LEASE = (
    "SELECT holder, fence, expires_at, value FROM leases "
    "WHERE name = ? AND released = 0 AND expires_at > ?"
)
_TAKE_OVER_LEASE = (
    "UPDATE leases SET holder = ?, fence = fence + 1, expires_at = ? "
    "WHERE name = ? AND holder = ? AND fence = ? AND released = 0"
)
_RELEASE_LEASE = (
    "UPDATE leases SET released = 1, value = coalesce(?, value) "
    "WHERE name = ? AND fence = ? AND holder = ?"
)


#: The first and the longest pause between two tries for another process's write lock.
_LOCK_POLL_SECONDS = (0.0002, 0.002)


def _begin_immediate(conn: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE``, waiting for another process's write lock in short steps.

    sqlite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries, so
    with several workers a transaction that lost the lock by a microsecond
    slept for milliseconds, and queued requests with it (the p99 of several
    workers was in the hundreds of ms). Here the lock is asked for again after
    0.2 ms, doubling to 2 ms, until the connection's busy timeout has passed;
    then sqlite's own error is raised, as before.
    """
    budget_ms = getattr(conn, "busy_timeout_ms", 0)
    if not budget_ms:
        conn.execute("BEGIN IMMEDIATE")
        return
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + budget_ms / 1000
        pause, longest = _LOCK_POLL_SECONDS
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, longest)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(budget_ms)}")


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed when the block ends, rolled back if it raises."""
    _begin_immediate(conn)
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        # The first error says more than a failed rollback, and sqlite rolls
        # back a transaction it could not finish by itself.
        with suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        raise


#: The write transaction of every read-then-write (``reports`` uses it too).
immediate = _immediate


def _record(conn: sqlite3.Connection, sql: str, key: str) -> ChallengeRecord | None:
    row = conn.execute(sql, (key,)).fetchone()
    return decode_record(row[0]) if row is not None else None


def _owner(conn: sqlite3.Connection, sql: str, key: str | None) -> str | None:
    if key is None:
        return None
    row = conn.execute(sql, (key,)).fetchone()
    return str(row[0]) if row is not None else None


def challenge_row(record: ChallengeRecord) -> tuple[str, str, str, float, str | None, str]:
    """The values of a record's row (its JSON included), in ``_INSERT_CHALLENGE`` order."""
    return (
        record.challenge_id,
        record.request_id,
        record.state.value,
        record.updated_at,
        payer_of(record),
        encode_record(record),
    )


def create_challenge(
    conn: sqlite3.Connection, record: ChallengeRecord, claim_key: str | None
) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
    """Insert unless the requestId exists; with a claim, both rows or neither."""
    if claim_key is None:
        # The hot path: one statement. An ignored insert means the requestId
        # (or, by a caller's bug, the challengeId) is taken.
        if conn.execute(_INSERT_CHALLENGE, challenge_row(record)).rowcount == 1:
            return record, True
        existing = _record(conn, _BY_REQUEST, record.request_id)
        if existing is not None:
            return existing, False
        # Either the challengeId is taken, or ``prune`` deleted the row that won
        # between the two statements: decide again under the write lock.
    with _immediate(conn):
        existing = _record(conn, _BY_REQUEST, record.request_id)
        if existing is not None:
            return existing, False
        owner = _owner(conn, _PAYMENT_OWNER, claim_key)
        if owner is not None and owner != record.challenge_id:
            return PaymentClaimed(owner)
        if conn.execute(_INSERT_CHALLENGE, challenge_row(record)).rowcount != 1:
            raise ValueError(f"challenge_id {record.challenge_id} already exists")
        if claim_key is not None:
            conn.execute(_CLAIM_PAYMENT, (claim_key, record.challenge_id))
        return record, True


def create_challenges(
    conn: sqlite3.Connection, inserts: Sequence[tuple[ChallengeRecord, tuple[Any, ...]]]
) -> list[tuple[ChallengeRecord, bool] | ValueError]:
    """Several claim-free inserts in one write transaction (the group commit).

    One multi-row ``INSERT OR IGNORE``: when every row went in (the usual
    case) that is the answer. Otherwise it is undone (to a savepoint) and each
    insert is decided on its own, in order, exactly as ``create_challenge``
    decides it: inserted, or the record that holds its requestId (also one
    inserted earlier in this batch), or a ``ValueError`` for a taken
    challengeId. A sqlite error rolls the whole batch back and raises.
    """
    with _immediate(conn):
        conn.execute("SAVEPOINT batch")
        cursor = conn.execute(_insert_rows(len(inserts)), [v for _, row in inserts for v in row])
        if cursor.rowcount == len(inserts):
            return [(record, True) for record, _ in inserts]
        conn.execute("ROLLBACK TO batch")
        outcomes: list[tuple[ChallengeRecord, bool] | ValueError] = []
        for record, row in inserts:
            if conn.execute(_INSERT_CHALLENGE, row).rowcount == 1:
                outcomes.append((record, True))
                continue
            existing = _record(conn, _BY_REQUEST, record.request_id)
            if existing is not None:
                outcomes.append((existing, False))
            else:
                outcomes.append(ValueError(f"challenge_id {record.challenge_id} already exists"))
        return outcomes


@functools.lru_cache(maxsize=64)
def _insert_rows(count: int) -> str:
    """``_INSERT_CHALLENGE`` for ``count`` rows in one statement."""
    return _INSERT_CHALLENGE + ", (?, ?, ?, ?, ?, ?)" * (count - 1)


def get_challenge(conn: sqlite3.Connection, challenge_id: str) -> ChallengeRecord | None:
    return _record(conn, _BY_ID, challenge_id)


def get_by_request_id(conn: sqlite3.Connection, request_id: str) -> ChallengeRecord | None:
    return _record(conn, _BY_REQUEST, request_id)


def get_by_payment(conn: sqlite3.Connection, key: str) -> ChallengeRecord | None:
    return _record(conn, _BY_PAYMENT, key)


def get_by_tx_hash(conn: sqlite3.Connection, tx_hash: str) -> ChallengeRecord | None:
    return _record(conn, _BY_TX, tx_claim_key(tx_hash))


def transition(conn: sqlite3.Connection, request: TransitionRequest) -> Result:
    """Compare-and-set plus its claims, all in one write transaction."""
    with _immediate(conn):
        record = _record(conn, _BY_ID, request.challenge_id)
        mismatch = check_state(record, request)
        if mismatch is not None:
            return mismatch
        assert record is not None  # check_state answers for a missing record
        key, tx = claim_keys(request)
        conflict = claim_conflict(
            record.challenge_id, _owner(conn, _PAYMENT_OWNER, key), _owner(conn, _TX_OWNER, tx)
        )
        if conflict is not None:
            return conflict
        updated = record.apply(request.changes, request.to, request.at, request.reason)
        conn.execute(
            _UPDATE_CHALLENGE,
            (
                updated.state.value,
                updated.updated_at,
                payer_of(updated),
                encode_record(updated),
                record.challenge_id,
            ),
        )
        released = key_to_release(record, request)
        if released is not None:
            conn.execute(_RELEASE_PAYMENT, (released, record.challenge_id))
        if key is not None:
            conn.execute(_CLAIM_PAYMENT, (key, record.challenge_id))
        if tx is not None:
            conn.execute(_CLAIM_TX, (tx, record.challenge_id))
        return TransitionApplied(updated)


def listing_query(
    states: Sequence[State] | None,
    updated_before: float | None,
    after: tuple[float, str] | None,
    limit: int,
) -> tuple[str, list[str | float | int]] | None:
    """``list_challenges``'s statement and parameters; ``None`` when nothing can match.

    The cursor is a row-value comparison on the columns the listing indexes
    end in, ``(updated_at, challenge_id)``, so a page is one index range
    whether or not it filters on a state (schema version 3).
    """
    clauses: list[str] = []
    params: list[str | float | int] = []
    if states is not None:
        wanted = state_values(states)
        if not wanted:
            return None
        clauses.append(f"state IN ({', '.join('?' * len(wanted))})")
        params.extend(wanted)
    if updated_before is not None:
        clauses.append("updated_at < ?")
        params.append(updated_before)
    if after is not None:
        clauses.append("(updated_at, challenge_id) > (?, ?)")
        params.extend((float(after[0]), after[1]))
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    params.append(max(limit, 0))
    # Only placeholders are formatted into the statement; every value is bound.
    sql = f"SELECT record FROM challenges{where} ORDER BY updated_at, challenge_id LIMIT ?"  # noqa: S608
    return sql, params


def list_challenges(
    conn: sqlite3.Connection, sql: str, params: Sequence[str | float | int]
) -> list[ChallengeRecord]:
    """Runs a ``listing_query``."""
    return [decode_record(row[0]) for row in conn.execute(sql, params)]


def prune(
    conn: sqlite3.Connection, states: Sequence[State], updated_before: float, limit: int
) -> int:
    """One write transaction: each chosen record leaves with every claim it owns."""
    wanted = state_values(states)
    if not wanted or limit <= 0:
        return 0
    # Only placeholders are formatted into the statement; every value is bound.
    sql = (
        "SELECT challenge_id FROM challenges "  # noqa: S608
        f"WHERE state IN ({', '.join('?' * len(wanted))}) AND updated_at < ? "
        "ORDER BY updated_at, challenge_id LIMIT ?"
    )
    with _immediate(conn):
        doomed = [(row[0],) for row in conn.execute(sql, [*wanted, updated_before, limit])]
        for statement in (_DELETE_PAYMENT_CLAIMS, _DELETE_TX_CLAIMS, _DELETE_CHALLENGE):
            conn.executemany(statement, doomed)
        return len(doomed)


def save_task(
    conn: sqlite3.Connection,
    task_id: str,
    document: Mapping[str, Any],
    expect: int | None,
    prune_after: float | None,
) -> int | None:
    """One conditional statement: sqlite makes the compare and the write atomic."""
    text = encode_task(document)
    if expect is None:
        created = conn.execute(_CREATE_TASK, (task_id, text, prune_after)).rowcount == 1
        return 1 if created else None
    replaced = conn.execute(_REPLACE_TASK, (text, prune_after, task_id, expect)).rowcount == 1
    return expect + 1 if replaced else None


def prune_tasks(conn: sqlite3.Connection, before: float, limit: int) -> int:
    if limit <= 0:
        return 0
    return int(conn.execute(_PRUNE_TASKS, (before, limit)).rowcount)


def get_task(conn: sqlite3.Connection, task_id: str) -> tuple[dict[str, Any], int] | None:
    row = conn.execute(_TASK, (task_id,)).fetchone()
    return (decode_task(row[0]), int(row[1])) if row is not None else None


def count_hits(
    conn: sqlite3.Connection, hits: Sequence[tuple[str, int]], window_end: float, now: float
) -> dict[str, int]:
    """One write transaction: sweep some expired counters, then add to every key.

    The sweep keeps the table from growing; the UPSERT itself also treats a
    counter whose window ended before ``now`` as absent, so a counter the sweep
    has not reached yet still starts again from zero.
    """
    totals: dict[str, int] = {}
    with _immediate(conn):
        conn.execute(_SWEEP_COUNTERS, (now, SWEEP_COUNTERS))
        for start in range(0, len(hits), _COUNTERS_PER_STATEMENT):
            chunk = hits[start : start + _COUNTERS_PER_STATEMENT]
            params = [now, window_end, *(value for pair in chunk for value in pair)]
            for key, total in conn.execute(_add_hits(len(chunk)), params).fetchall():
                totals[key] = int(total)
    return {key: totals[key] for key, _ in hits}


@functools.lru_cache(maxsize=16)
def _add_hits(count: int) -> str:
    """The UPSERT for ``count`` keys: ``?1`` is now, ``?2`` the window's end, then key, delta."""
    rows = ", ".join(f"(?{3 + 2 * i}, ?2, ?{4 + 2 * i})" for i in range(count))
    return (
        f"INSERT INTO rate_counters (key, window_end, hits) VALUES {rows} "  # noqa: S608
        "ON CONFLICT (key) DO UPDATE SET "
        "hits = CASE WHEN window_end < ?1 THEN excluded.hits ELSE hits + excluded.hits END, "
        "window_end = excluded.window_end "
        "RETURNING key, hits"
    )


def acquire_lease(
    conn: sqlite3.Connection, name: str, holder: str, ttl: float, now: float
) -> Lease | None:
    with _immediate(conn):
        row = conn.execute(_LEASE, (name,)).fetchone()
        if row is not None and not row[2] and row[1] > now:
            return None
        fence = int(row[0]) + 1 if row is not None else 1
        value = row[3] if row is not None else None
        conn.execute(_TAKE_LEASE, (name, holder, fence, now + ttl, value))
        return Lease(name, holder, fence, now + ttl, value)


def release_lease(conn: sqlite3.Connection, lease: Lease, value: str | None) -> bool:
    """One conditional update: the fence and holder match, or someone took over."""
    cursor = conn.execute(_RELEASE_LEASE, (value, lease.name, lease.fence, lease.holder))
    return cursor.rowcount == 1


def held_lease(conn: sqlite3.Connection, name: str, now: float) -> Lease | None:
    row = conn.execute(_HELD_LEASE, (name, now)).fetchone()
    if row is None:
        return None
    return Lease(name, row[0], int(row[1]), float(row[2]), row[3])


def take_over_lease(
    conn: sqlite3.Connection, held: Lease, holder: str, ttl: float, now: float
) -> Lease | None:
    """One transaction: the holder and fence read before still stand, or nothing changes."""
    with _immediate(conn):
        args = (holder, now + ttl, held.name, held.holder, held.fence)
        if conn.execute(_TAKE_OVER_LEASE, args).rowcount != 1:
            return None
        value = conn.execute(_LEASE, (held.name,)).fetchone()[3]
        return Lease(held.name, holder, held.fence + 1, now + ttl, value)


def ping(conn: sqlite3.Connection) -> None:
    """Reads the file header, so a vanished or unreadable file shows up."""
    conn.execute("PRAGMA user_version").fetchone()
