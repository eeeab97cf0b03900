"""The sqlite store's export and import (``PortableStore``), on the store's own thread.

Export reads one page at a time, each in one read transaction, in key order:
a page of challenges comes with the claims its records own. Import writes one
batch in one ``BEGIN IMMEDIATE`` transaction with plain ``INSERT`` statements:
the primary keys and the unique requestId refuse whatever exists (the whole
batch rolls back, and the caller gets a ``ValueError``). A lease that exists
keeps its holder and value and raises its fence to the imported one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from x402srv.default_plugins.sqlite import credits
from x402srv.default_plugins.sqlite.ops import _immediate
from x402srv.interfaces import (
    CreditEntry,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
)
from x402srv.stores.credit_rules import decode_account, encode_account
from x402srv.stores.dump_rules import sort_items
from x402srv.stores.rules import decode_record, decode_task, encode_record, encode_task, payer_of

__all__ = ["PAGE", "export_page", "import_items"]

#: Items per page of an export (one read transaction each).
PAGE = 500

_CHALLENGES = (
    "SELECT challenge_id, record FROM challenges WHERE challenge_id > ? "
    "ORDER BY challenge_id LIMIT ?"
)
_TASKS = (
    "SELECT task_id, document, version, prune_after FROM tasks WHERE task_id > ? "
    "ORDER BY task_id LIMIT ?"
)
_ACCOUNTS = "SELECT grant_id, account FROM credits WHERE grant_id > ? ORDER BY grant_id LIMIT ?"
_LEASES = "SELECT name, fence, value FROM leases WHERE name > ? ORDER BY name LIMIT ?"
_PAYMENTS_OF = "SELECT payment_key, challenge_id FROM payment_claims WHERE challenge_id IN ({ids})"
_TXS_OF = "SELECT tx_hash, challenge_id FROM tx_claims WHERE challenge_id IN ({ids})"
_ENTRIES_OF = (
    "SELECT grant_id, key, amount, at FROM credit_entries WHERE grant_id IN ({ids}) ORDER BY seq"
)


def _owned(conn: sqlite3.Connection, template: str, ids: list[str]) -> dict[str, list[str]]:
    """What ``template`` (value, owner ... IN ({ids})) lists, by owner, in its order."""
    owned: dict[str, list[str]] = {}
    for value, owner in conn.execute(template.replace("{ids}", ", ".join("?" * len(ids))), ids):
        owned.setdefault(owner, []).append(value)
    return owned


def export_page(conn: sqlite3.Connection, kind: str, after: str) -> tuple[list[ExportItem], str]:
    """Up to ``PAGE`` items of ``kind`` after key ``after``, and the last key read."""
    conn.execute("BEGIN")
    try:
        return _page(conn, kind, after)
    finally:
        conn.execute("COMMIT")


def _page(conn: sqlite3.Connection, kind: str, after: str) -> tuple[list[ExportItem], str]:
    items: list[ExportItem] = []
    if kind == "challenges":
        rows = conn.execute(_CHALLENGES, (after, PAGE)).fetchall()
        ids = [row[0] for row in rows]
        payments = _owned(conn, _PAYMENTS_OF, ids) if ids else {}
        txs = _owned(conn, _TXS_OF, ids) if ids else {}
        for challenge_id, text in rows:
            items.append(
                ExportedChallenge(
                    decode_record(text),
                    tuple(sorted(payments.get(challenge_id, ()))),
                    tuple(sorted(txs.get(challenge_id, ()))),
                )
            )
    elif kind == "tasks":
        rows = conn.execute(_TASKS, (after, PAGE)).fetchall()
        for task_id, document, version, prune_after in rows:
            items.append(ExportedTask(task_id, decode_task(document), int(version), prune_after))
    elif kind == "credits":
        rows = conn.execute(_ACCOUNTS, (after, PAGE)).fetchall()
        entries = _entries(conn, [row[0] for row in rows]) if rows else {}
        for grant_id, text in rows:
            account = decode_account(text)
            items.append(
                replace(
                    account,
                    entries=tuple(entries.get(grant_id, ())),
                    used_calls=credits.used_calls(conn, grant_id),
                )
            )
    else:
        rows = conn.execute(_LEASES, (after, PAGE)).fetchall()
        items += [ExportedLease(name, int(fence), value) for name, fence, value in rows]
    return items, (rows[-1][0] if rows else after)


def _entries(conn: sqlite3.Connection, grants: list[str]) -> dict[str, list[CreditEntry]]:
    entries: dict[str, list[CreditEntry]] = {}
    marks = ", ".join("?" * len(grants))
    for grant_id, key, amount, at in conn.execute(_ENTRIES_OF.replace("{ids}", marks), grants):
        entries.setdefault(grant_id, []).append(CreditEntry(key, int(amount), float(at)))
    return entries


def import_items(conn: sqlite3.Connection, items: Sequence[ExportItem], now: float) -> None:
    """One write transaction; ``ValueError`` (nothing written) when anything exists."""
    batch = sort_items(items)
    try:
        with _immediate(conn):
            for item in batch.challenges:
                record = item.record
                conn.execute(
                    "INSERT INTO challenges "
                    "(challenge_id, request_id, state, updated_at, payer, record) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        record.challenge_id,
                        record.request_id,
                        record.state.value,
                        record.updated_at,
                        payer_of(record),
                        encode_record(record),
                    ),
                )
                conn.executemany(
                    "INSERT INTO payment_claims (payment_key, challenge_id) VALUES (?, ?)",
                    [(key, record.challenge_id) for key in item.payment_claims],
                )
                conn.executemany(
                    "INSERT INTO tx_claims (tx_hash, challenge_id) VALUES (?, ?)",
                    [(tx, record.challenge_id) for tx in item.tx_claims],
                )
            conn.executemany(
                "INSERT INTO tasks (task_id, version, document, prune_after) VALUES (?, ?, ?, ?)",
                [
                    (t.task_id, t.version, encode_task(t.document), t.prune_after)
                    for t in batch.tasks
                ],
            )
            for account in batch.live_accounts(now):
                # An account past its keep_until is absent (credit rules): it makes way.
                conn.execute(
                    "DELETE FROM credit_entries WHERE grant_id IN "
                    "(SELECT grant_id FROM credits WHERE grant_id = ? AND keep_until < ?)",
                    (account.grant_id, now),
                )
                conn.execute(
                    "DELETE FROM used_calls WHERE grant_id IN "
                    "(SELECT grant_id FROM credits WHERE grant_id = ? AND keep_until < ?)",
                    (account.grant_id, now),
                )
                conn.execute(
                    "DELETE FROM credits WHERE grant_id = ? AND keep_until < ?",
                    (account.grant_id, now),
                )
                conn.execute(
                    "INSERT INTO credits (grant_id, keep_until, account) VALUES (?, ?, ?)",
                    (
                        account.grant_id,
                        account.keep_until,
                        encode_account(account, entries=False, used_calls=False),
                    ),
                )
                conn.executemany(  # oldest first: ``seq`` grows toward the newest
                    "INSERT INTO used_calls (grant_id, at, route, reserved, charged) "
                    "VALUES (?, ?, ?, ?, ?)",
                    [
                        (account.grant_id, c.at, c.route, c.reserved, c.charged)
                        for c in reversed(account.used_calls)
                    ],
                )
                conn.executemany(
                    "INSERT INTO credit_entries (grant_id, key, amount, at) VALUES (?, ?, ?, ?)",
                    [(account.grant_id, e.key, e.amount, e.at) for e in account.entries],
                )
            conn.executemany(
                "INSERT INTO leases (name, holder, fence, expires_at, released, value) "
                "VALUES (?, '', ?, 0, 1, ?) "
                "ON CONFLICT (name) DO UPDATE SET fence = max(fence, excluded.fence)",
                [(lease.name, lease.fence, lease.value) for lease in batch.leases],
            )
    except sqlite3.IntegrityError as exc:
        raise ValueError(f"the store already holds part of the import ({exc})") from None
