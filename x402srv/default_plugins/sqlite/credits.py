"""The sqlite store's credit operations, each inside one write transaction on one connection.

Like ``ops``, these run on the store's own thread. Each loads the
grant's account, lets ``credit_rules`` decide, and writes the result inside
one ``BEGIN IMMEDIATE`` transaction, so two workers spending from the same
grant take turns on the write lock and never both take the last credit.
``credit`` is a transaction of its own; ``spend``, ``refund`` and ``settle``
are steps that the store group-commits (``batch``): several callers' steps run
one after the other in ``in_one_transaction``, each on the account as the
step before it left it. The
account row holds the account's JSON without its entries; the entries are
rows of ``credit_entries``, whose unique ``(grant_id, key)`` means a key is
credited once even if a caller asked twice. An account past ``keep_until``
counts as absent (``credit_rules.live``); ``credit`` deletes a few of those
each time it runs, so the table stays as large as the live grants.

A grant's used calls (calls charged by use) are rows of ``used_calls``, not
part of the account's JSON: a spend then reads and writes a few hundred bytes
instead of a hundred calls' worth, and a settle adds one row. One settle in
``TRIM_USED_CALLS_EVERY`` (at random) also drops its grant's rows past the newest
``USED_CALLS``: the scan that finds them cost a settle as much as its insert,
and reads take the newest ``USED_CALLS`` whatever the table holds beyond them.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from x402srv.default_plugins.sqlite.ops import _immediate
from x402srv.interfaces import CreditAccount, Credited, CreditEntry, RateWindow, Spend, UsedCall
from x402srv.stores.credit_rules import (
    USED_CALLS,
    apply_credit,
    apply_refund,
    apply_settle,
    apply_spend,
    decode_account,
    encode_account,
)
from x402srv.stores.credit_rules import live as live_account

__all__ = [
    "SWEEP_ACCOUNTS",
    "TRIM_USED_CALLS_EVERY",
    "credit",
    "get_credits",
    "in_one_transaction",
    "refund",
    "settle",
    "spend",
    "used_calls",
]

T = TypeVar("T")

#: Forgotten accounts deleted per ``credit`` at most (each purchase creates one at most).
SWEEP_ACCOUNTS = 20
#: A settle trims its grant's used calls with a chance of one in this many, so a grant
#: keeps ``USED_CALLS`` rows plus this many on average. At random rather than on every
#: Nth ``seq``: ``seq`` counts every grant's calls, and two grants taking turns would
#: see only odd or even ones, one of them never trimmed.
TRIM_USED_CALLS_EVERY = 16

_ACCOUNT = "SELECT account FROM credits WHERE grant_id = ?"
_SAVE_ACCOUNT = "INSERT OR REPLACE INTO credits (grant_id, keep_until, account) VALUES (?, ?, ?)"
_HAS_KEY = "SELECT 1 FROM credit_entries WHERE grant_id = ? AND key = ?"
_ADD_ENTRY = "INSERT INTO credit_entries (grant_id, key, amount, at) VALUES (?, ?, ?, ?)"
_ENTRIES = "SELECT key, amount, at FROM credit_entries WHERE grant_id = ? ORDER BY seq"
_DROP_ENTRIES = "DELETE FROM credit_entries WHERE grant_id = ?"
_DROP_ACCOUNT = "DELETE FROM credits WHERE grant_id = ?"
_FORGOTTEN = "SELECT grant_id FROM credits WHERE keep_until < ? LIMIT ?"
_ADD_USED_CALL = (
    "INSERT INTO used_calls (grant_id, at, route, reserved, charged) VALUES (?, ?, ?, ?, ?)"
)
_TRIM_USED_CALLS = (
    "DELETE FROM used_calls WHERE grant_id = ? AND seq <= (SELECT seq FROM used_calls "
    "WHERE grant_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)"
)
_USED_CALLS = (
    "SELECT at, route, reserved, charged FROM used_calls WHERE grant_id = ? "
    "ORDER BY seq DESC LIMIT ?"
)
_DROP_USED_CALLS = "DELETE FROM used_calls WHERE grant_id = ?"


def _load(conn: sqlite3.Connection, grant_id: str) -> CreditAccount | None:
    row = conn.execute(_ACCOUNT, (grant_id,)).fetchone()
    return decode_account(row[0]) if row is not None else None


def _save(conn: sqlite3.Connection, account: CreditAccount) -> None:
    conn.execute(
        _SAVE_ACCOUNT,
        (
            account.grant_id,
            account.keep_until,
            encode_account(account, entries=False, used_calls=False),
        ),
    )


def _restart_if_forgotten(
    conn: sqlite3.Connection, stored: CreditAccount | None, now: float
) -> CreditAccount | None:
    """The live account; a stored one past ``keep_until`` loses its keys (it starts anew)."""
    current = live_account(stored, now)
    if stored is not None and current is None:
        conn.execute(_DROP_ENTRIES, (stored.grant_id,))
        conn.execute(_DROP_USED_CALLS, (stored.grant_id,))
    return current


def credit(
    conn: sqlite3.Connection,
    grant_id: str,
    amount: int,
    key: str,
    now: float,
    keep_until: float,
) -> Credited:
    with _immediate(conn):
        forgotten = conn.execute(_FORGOTTEN, (now, SWEEP_ACCOUNTS)).fetchall()
        conn.executemany(_DROP_ENTRIES, forgotten)
        conn.executemany(_DROP_USED_CALLS, forgotten)
        conn.executemany(_DROP_ACCOUNT, forgotten)
        current = _restart_if_forgotten(conn, _load(conn, grant_id), now)
        before = current is not None and conn.execute(_HAS_KEY, (grant_id, key)).fetchone()
        updated, answer = apply_credit(
            current,
            grant_id,
            amount,
            key=key,
            now=now,
            keep_until=keep_until,
            credited_before=bool(before),
        )
        if updated is not None:
            _save(conn, updated)
            entry = updated.entries[-1]
            conn.execute(_ADD_ENTRY, (grant_id, entry.key, entry.amount, entry.at))
        return answer


def in_one_transaction(
    conn: sqlite3.Connection, steps: Sequence[Callable[[sqlite3.Connection], T]]
) -> list[T | ValueError]:
    """Run ``steps`` in order in one write transaction; their outcomes, in the same order.

    A step refused for its arguments raises ``ValueError`` before writing
    anything (the ``credit_rules`` check first), so it fails alone; any other
    error rolls the whole transaction back and raises.
    """
    outcomes: list[T | ValueError] = []
    with _immediate(conn):
        for step in steps:
            try:
                outcomes.append(step(conn))
            except ValueError as exc:
                outcomes.append(exc)
    return outcomes


def spend(
    conn: sqlite3.Connection,
    grant_id: str,
    cost: int,
    now: float,
    keep_until: float,
    rate: RateWindow | None,
    credits: bool,
) -> Spend:
    """A step (``in_one_transaction``)."""
    stored = _load(conn, grant_id)
    updated, answer = apply_spend(
        stored, grant_id, cost, now=now, keep_until=keep_until, rate=rate, credits=credits
    )
    if updated is not None:
        _restart_if_forgotten(conn, stored, now)
        _save(conn, updated)
    return answer


def refund(conn: sqlite3.Connection, grant_id: str, amount: int, now: float) -> int | None:
    """A step (``in_one_transaction``)."""
    stored = _load(conn, grant_id)
    updated, balance = apply_refund(stored, amount, now=now)
    if updated is not None:
        _save(conn, updated)
    return balance


def settle(
    conn: sqlite3.Connection, grant_id: str, release: int, now: float, call: UsedCall
) -> int | None:
    """A step (``in_one_transaction``)."""
    updated, balance = apply_settle(_load(conn, grant_id), release, call, now=now)
    if updated is not None:
        _save(conn, updated)
        conn.execute(_ADD_USED_CALL, (grant_id, call.at, call.route, call.reserved, call.charged))
        if random.random() < 1 / TRIM_USED_CALLS_EVERY:
            conn.execute(_TRIM_USED_CALLS, (grant_id, grant_id, USED_CALLS))
    return balance


def get_credits(conn: sqlite3.Connection, grant_id: str) -> CreditAccount | None:
    """The account and its entries, read in one (deferred, read-only) transaction."""
    conn.execute("BEGIN")
    try:
        account = _load(conn, grant_id)
        if account is None:
            return None
        entries = tuple(
            CreditEntry(str(k), int(a), float(at))
            for k, a, at in conn.execute(_ENTRIES, (grant_id,))
        )
        used = used_calls(conn, grant_id)
    finally:
        conn.execute("COMMIT")
    return replace(account, entries=entries, used_calls=used)


def used_calls(conn: sqlite3.Connection, grant_id: str) -> tuple[UsedCall, ...]:
    """The grant's newest ``USED_CALLS`` used calls, newest first."""
    return tuple(
        UsedCall(float(at), str(route), int(reserved), int(charged))
        for at, route, reserved, charged in conn.execute(_USED_CALLS, (grant_id, USED_CALLS))
    )
