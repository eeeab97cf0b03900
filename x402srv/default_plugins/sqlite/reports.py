"""The sqlite store's reads and counters for the seller's console.

``find_challenges`` lists newest first. One state (or none, or a payer) is one
backward range of an index ending in ``(updated_at, challenge_id)``; several
states are one such range per state, merged here, because sqlite would sort
every matching row of an ``IN`` list to answer a page. ``add_counts`` is one
write transaction of UPSERTs into ``counts`` (bucket, name): what an unpaid
request leaves behind is a counter moving, never a row.
"""

from __future__ import annotations

import functools
import heapq
import sqlite3
from collections.abc import Sequence

from x402srv.access.records import ChallengeRecord, State
from x402srv.default_plugins.sqlite.ops import immediate
from x402srv.stores.rules import decode_record, state_values

__all__ = ["SWEEP_BUCKETS", "add_counts", "find_challenges", "read_counts"]

#: Buckets deleted per ``add_counts`` call at most: old buckets leave a few at a time.
SWEEP_BUCKETS = 8
_SWEEP = (
    "DELETE FROM counts WHERE bucket IN "
    "(SELECT DISTINCT bucket FROM counts WHERE bucket < ? ORDER BY bucket LIMIT ?)"
)
_ADD = (
    "INSERT INTO counts (bucket, name, n) VALUES (?, ?, ?) "
    "ON CONFLICT (bucket, name) DO UPDATE SET n = n + excluded.n"
)
_READ = "SELECT bucket, name, n FROM counts WHERE bucket >= ? AND bucket < ?"


@functools.lru_cache(maxsize=32)
def _find_statement(by_state: bool, by_payer: int, cursor: bool) -> str:
    """The statement for one index range: ``by_payer`` is how many states filter the payer's."""
    clauses = []
    if by_state:
        clauses.append("state = ?")
    if by_payer:
        clauses.append("payer = ?")
        if by_payer > 1:
            clauses.append(f"state IN ({', '.join('?' * (by_payer - 1))})")
    if cursor:
        clauses.append("(updated_at, challenge_id) < (?, ?)")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    if by_payer:
        index = "challenges_by_payer"
    elif by_state:
        index = "challenges_by_state"
    else:
        index = "challenges_by_updated"
    # Only fixed clauses and placeholders are formatted in; every value is bound.
    return (
        "SELECT updated_at, challenge_id, record FROM challenges "  # noqa: S608
        f"INDEXED BY {index}{where} ORDER BY updated_at DESC, challenge_id DESC LIMIT ?"
    )


def find_challenges(
    conn: sqlite3.Connection,
    states: Sequence[State] | None,
    payer: str | None,
    before: tuple[float, str] | None,
    limit: int,
) -> list[ChallengeRecord]:
    """Newest first; the ranges are read in one transaction, so they agree."""
    wanted = None if states is None else state_values(states)
    if limit <= 0 or wanted == []:
        return []
    cursor: list[str | float] = [] if before is None else [float(before[0]), before[1]]
    queries: list[tuple[str, list[str | float | int]]] = []
    if payer is not None:
        # The payer's own index decides; states (if any) filter that one range.
        filters = wanted or []
        sql = _find_statement(False, 1 + len(filters), before is not None)
        queries.append((sql, [payer.lower(), *filters, *cursor, limit]))
    elif wanted is None:
        queries.append((_find_statement(False, 0, before is not None), [*cursor, limit]))
    else:
        sql = _find_statement(True, 0, before is not None)
        queries.extend((sql, [state, *cursor, limit]) for state in wanted)
    ranges: list[list[tuple[float, str, str]]] = []
    conn.execute("BEGIN")
    try:
        for sql, params in queries:
            ranges.append([(row[0], row[1], row[2]) for row in conn.execute(sql, params)])
    finally:
        conn.execute("COMMIT")
    newest = heapq.merge(*ranges, key=lambda row: (row[0], row[1]), reverse=True)
    return [decode_record(row[2]) for _, row in zip(range(limit), newest, strict=False)]


def add_counts(
    conn: sqlite3.Connection, counts: Sequence[tuple[int, str, int]], forget_before: int
) -> None:
    """One write transaction: forget a few old buckets, then add every delta."""
    with immediate(conn):
        conn.execute(_SWEEP, (forget_before, SWEEP_BUCKETS))
        conn.executemany(_ADD, counts)


def read_counts(conn: sqlite3.Connection, start: int, end: int) -> dict[tuple[int, str], int]:
    """The primary key's range ``[start, end)``."""
    return {(int(b), str(name)): int(n) for b, name, n in conn.execute(_READ, (start, end))}
