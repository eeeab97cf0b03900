"""The sqlite store's refund operations, each one transaction on the store's connection.

``create`` reads the purchase's refunds and inserts the new one inside one
``BEGIN IMMEDIATE`` transaction: two workers asking for the last of a
purchase's money take turns on the write lock, and the second one sees the
first one's refund (``x402srv.refunds.rules.decide_create``). Amounts stay in
the record's JSON as decimal strings, summed by Python: exact for any token.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from x402srv.default_plugins.sqlite.ops import _immediate
from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import (
    OverRefund,
    RefundCreated,
    RefundMismatch,
    RefundMoved,
    decide_create,
    decide_move,
)

__all__ = ["create", "get", "import_refunds", "listing", "move"]

_INSERT = (
    "INSERT INTO refunds (refund_id, purchase_id, state, created_at, record) VALUES (?, ?, ?, ?, ?)"
)
_BY_ID = "SELECT record FROM refunds WHERE refund_id = ?"
_OF_PURCHASE = "SELECT record FROM refunds WHERE purchase_id = ?"
_UPDATE = "UPDATE refunds SET state = ?, record = ? WHERE refund_id = ?"


def _decode(text: str) -> RefundRecord:
    return RefundRecord.from_dict(json.loads(text))


def _encode(record: RefundRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"))


def _insert(conn: sqlite3.Connection, record: RefundRecord) -> None:
    conn.execute(
        _INSERT,
        (
            record.refund_id,
            record.purchase_id,
            record.state.value,
            record.created_at,
            _encode(record),
        ),
    )


def create(conn: sqlite3.Connection, refund: RefundRecord, paid: int) -> RefundCreated | OverRefund:
    with _immediate(conn):
        known = conn.execute(_BY_ID, (refund.refund_id,)).fetchone()
        if known is not None:
            return RefundCreated(_decode(known[0]), created=False)
        rows = conn.execute(_OF_PURCHASE, (refund.purchase_id,)).fetchall()
        decided = decide_create([_decode(row[0]) for row in rows], refund, paid=paid)
        if isinstance(decided, RefundCreated) and decided.created:
            _insert(conn, refund)
        return decided


def move(conn: sqlite3.Connection, change: RefundMove) -> RefundMoved | RefundMismatch:
    with _immediate(conn):
        row = conn.execute(_BY_ID, (change.refund_id,)).fetchone()
        decided = decide_move(_decode(row[0]) if row is not None else None, change)
        if isinstance(decided, RefundMoved):
            record = decided.record
            conn.execute(_UPDATE, (record.state.value, _encode(record), record.refund_id))
        return decided


def get(conn: sqlite3.Connection, refund_id: str) -> RefundRecord | None:
    row = conn.execute(_BY_ID, (refund_id,)).fetchone()
    return _decode(row[0]) if row is not None else None


def listing(
    conn: sqlite3.Connection,
    purchase_id: str | None,
    states: Sequence[RefundState] | None,
    after: tuple[float, str] | None,
    limit: int,
) -> list[RefundRecord]:
    where: list[str] = []
    args: list[object] = []
    if purchase_id is not None:
        where.append("purchase_id = ?")
        args.append(purchase_id)
    if states is not None:
        if not states:
            return []
        where.append(f"state IN ({', '.join('?' for _ in states)})")
        args.extend(state.value for state in states)
    if after is not None:
        where.append("(created_at, refund_id) > (?, ?)")
        args.extend(after)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = f"SELECT record FROM refunds{clause} ORDER BY created_at, refund_id LIMIT ?"  # noqa: S608
    rows = conn.execute(sql, (*args, max(0, limit))).fetchall()
    return [_decode(row[0]) for row in rows]


def import_refunds(conn: sqlite3.Connection, refunds: Sequence[RefundRecord]) -> None:
    with _immediate(conn):
        for refund in refunds:
            if conn.execute(_BY_ID, (refund.refund_id,)).fetchone() is not None:
                raise ValueError(f"refund {refund.refund_id} exists")
            _insert(conn, refund)
