"""The PostgreSQL store's export and import (``PortableStore``), mixed into ``PostgresStore``.

Export reads one page per statement in key order; a statement sees one
snapshot, so a page of challenges comes with exactly the claims its records
own then. Import writes one batch in one transaction with plain ``INSERT``
statements: the primary keys and the unique requestId refuse whatever exists
(the transaction rolls back, the caller gets a ``ValueError``). A lease that
exists keeps its holder and value and raises its fence to the imported one.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from asyncpg import exceptions as pg

from x402srv.plugin import (
    CreditEntry,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    decode_account,
    decode_record,
    decode_task,
    encode_account,
    encode_record,
    encode_task,
    sort_items,
)

from .statements import Statements

if TYPE_CHECKING:
    from .connection import Conn

__all__ = ["PAGE", "DumpMethods"]

T = TypeVar("T")

#: Items per page of an export (one statement each).
PAGE = 500

_PAGES = {
    "challenges": (
        "SELECT c.challenge_id AS key, c.record, "
        "ARRAY(SELECT payment_key FROM {schema}.payment_claims p "
        "WHERE p.challenge_id = c.challenge_id ORDER BY payment_key) AS payments, "
        "ARRAY(SELECT tx_hash FROM {schema}.tx_claims t "
        "WHERE t.challenge_id = c.challenge_id ORDER BY tx_hash) AS txs "
        "FROM {schema}.challenges c WHERE c.challenge_id > $1 ORDER BY c.challenge_id LIMIT $2"
    ),
    "tasks": (
        "SELECT task_id AS key, document, version, prune_after FROM {schema}.tasks "
        "WHERE task_id > $1 ORDER BY task_id LIMIT $2"
    ),
    "credits": (
        "SELECT c.grant_id AS key, c.account, "
        "ARRAY(SELECT key FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS keys, "
        "ARRAY(SELECT amount FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS amounts, "
        "ARRAY(SELECT at FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS ats "
        "FROM {schema}.credits c WHERE c.grant_id > $1 ORDER BY c.grant_id LIMIT $2"
    ),
    "leases": (
        "SELECT name AS key, fence, value FROM {schema}.leases WHERE name > $1 "
        "ORDER BY name LIMIT $2"
    ),
}

_INSERTS = {
    "challenge": (
        "INSERT INTO {schema}.challenges (challenge_id, request_id, state, updated_at, record) "
        "VALUES ($1, $2, $3, $4, $5)"
    ),
    "payment": "INSERT INTO {schema}.payment_claims (payment_key, challenge_id) VALUES ($1, $2)",
    "tx": "INSERT INTO {schema}.tx_claims (tx_hash, challenge_id) VALUES ($1, $2)",
    "task": (
        "INSERT INTO {schema}.tasks (task_id, version, document, prune_after) "
        "VALUES ($1, $2, $3, $4)"
    ),
    # An account past its keep_until is absent (credit rules): it makes way.
    "forgotten": (
        "DELETE FROM {schema}.credits WHERE grant_id = ANY($1::text[]) AND keep_until < $2"
    ),
    "account": "INSERT INTO {schema}.credits (grant_id, keep_until, account) VALUES ($1, $2, $3)",
    "entry": (
        "INSERT INTO {schema}.credit_entries (grant_id, key, amount, at) VALUES ($1, $2, $3, $4)"
    ),
    "lease": (
        "INSERT INTO {schema}.leases AS l (name, holder, fence, expires_at, released, value) "
        "VALUES ($1, '', $2, 0, true, $3) "
        "ON CONFLICT (name) DO UPDATE SET fence = GREATEST(l.fence, excluded.fence)"
    ),
}


class DumpMethods:
    """``export_items``/``import_items`` over ``_run`` (see ``PostgresStore``)."""

    sql: Statements

    async def _run(self, op: str, work: Callable[[Conn], Awaitable[T]]) -> T:
        raise NotImplementedError

    def _text(self, template: str) -> str:
        return template.replace("{schema}", f'"{self.sql.schema}"')

    async def export_items(self) -> AsyncIterator[ExportItem]:
        for kind, template in _PAGES.items():
            statement, after = self._text(template), ""
            while True:
                rows = await self._run("export", functools.partial(_fetch, statement, after))
                for row in rows:
                    yield _item(kind, row)
                if len(rows) < PAGE:
                    break
                after = rows[-1]["key"]

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        batch = sort_items(items)
        sql = {name: self._text(template) for name, template in _INSERTS.items()}
        accounts = batch.live_accounts(now)

        async def work(conn: Conn) -> None:
            async with conn.transaction():
                records = [c.record for c in batch.challenges]
                await _many(conn, sql["challenge"], [
                    (r.challenge_id, r.request_id, r.state.value, r.updated_at, encode_record(r))
                    for r in records
                ])  # fmt: skip
                await _many(conn, sql["payment"], [
                    (key, c.record.challenge_id)
                    for c in batch.challenges
                    for key in c.payment_claims
                ])  # fmt: skip
                await _many(conn, sql["tx"], [
                    (tx, c.record.challenge_id) for c in batch.challenges for tx in c.tx_claims
                ])  # fmt: skip
                await _many(conn, sql["task"], [
                    (t.task_id, t.version, encode_task(t.document), t.prune_after)
                    for t in batch.tasks
                ])  # fmt: skip
                await conn.execute(sql["forgotten"], [a.grant_id for a in accounts], now)
                await _many(conn, sql["account"], [
                    (a.grant_id, a.keep_until, encode_account(a, entries=False)) for a in accounts
                ])  # fmt: skip
                await _many(conn, sql["entry"], [
                    (a.grant_id, e.key, e.amount, e.at) for a in accounts for e in a.entries
                ])  # fmt: skip
                await _many(conn, sql["lease"], [
                    (lease.name, lease.fence, lease.value) for lease in batch.leases
                ])  # fmt: skip

        await self._run("import", work)


async def _fetch(statement: str, after: str, conn: Conn) -> list[Any]:
    return list(await conn.fetch(statement, after, PAGE))


async def _many(conn: Conn, statement: str, rows: list[tuple[Any, ...]]) -> None:
    """``executemany``; a row that exists already is the caller's ``ValueError``."""
    if not rows:
        return
    try:
        await conn.executemany(statement, rows)
    except pg.UniqueViolationError as exc:
        raise ValueError(f"the store already holds part of the import ({exc.detail})") from None


def _item(kind: str, row: Any) -> ExportItem:
    if kind == "challenges":
        return ExportedChallenge(
            decode_record(row["record"]), tuple(row["payments"]), tuple(row["txs"])
        )
    if kind == "tasks":
        return ExportedTask(
            row["key"], decode_task(row["document"]), int(row["version"]), row["prune_after"]
        )
    if kind == "credits":
        entries = tuple(
            CreditEntry(str(k), int(a), float(at))
            for k, a, at in zip(row["keys"], row["amounts"], row["ats"], strict=True)
        )
        return replace(decode_account(row["account"]), entries=entries)
    return ExportedLease(row["key"], int(row["fence"]), row["value"])
