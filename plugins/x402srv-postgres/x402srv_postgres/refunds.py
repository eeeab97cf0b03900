"""The PostgreSQL store's refunds (``RefundStore``), mixed into ``PostgresStore``.

The claim: one transaction takes a transaction-scoped advisory lock on the
purchase, adds up what its refunds hold (every state but FAILED) and inserts
the new refund only if the total stays within what the purchase paid. Two
instances asking at once for the same purchase take turns on the lock, and
under READ COMMITTED the second one's sum sees the first one's refund. A move
is optimistic compare-and-set on the row's version, as for challenges and
credits (migrations/0005).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, TypeVar

from x402srv.plugin import (
    OverRefund,
    RefundCreated,
    RefundMismatch,
    RefundMove,
    RefundMoved,
    RefundRecord,
    RefundState,
    StoreUnavailable,
    decide_move,
)

from .statements import storable

if TYPE_CHECKING:
    from .connection import Conn

__all__ = ["RefundMethods"]

T = TypeVar("T")

#: Rounds of read-decide-write one move may lose to other writers of the refund.
MAX_ROUNDS = 64

#: Every value a bind parameter; ``{schema}`` becomes the store's quoted schema.
_TEMPLATES = {
    "insert": (
        "INSERT INTO {schema}.refunds (refund_id, purchase_id, state, amount, created_at, "
        "version, record) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    ),
    "lock": "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
    "by_id": "SELECT record FROM {schema}.refunds WHERE refund_id = $1",
    "held": (
        "SELECT coalesce(sum(amount), 0) FROM {schema}.refunds "
        "WHERE purchase_id = $1 AND state <> 'FAILED'"
    ),
    "update": (
        "UPDATE {schema}.refunds SET state = $2, version = $3, record = $4 "
        "WHERE refund_id = $1 AND version = $5"
    ),
    "select": "SELECT record FROM {schema}.refunds",
}


def _encode(record: RefundRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"))


def _decode(text: str) -> RefundRecord:
    return RefundRecord.from_dict(json.loads(text))


class RefundMethods:
    """``create_refund``/``move_refund``/... over ``_run`` (see ``PostgresStore``)."""

    schema: str

    async def _run(self, op: str, work: Callable[[Conn], Awaitable[T]]) -> T:
        raise NotImplementedError

    def _sql(self, name: str) -> str:
        return _TEMPLATES[name].replace("{schema}", f'"{self.schema}"')

    async def _insert(self, conn: Conn, r: RefundRecord) -> None:
        await conn.execute(
            self._sql("insert"),
            r.refund_id,
            r.purchase_id,
            r.state.value,
            Decimal(r.amount),
            float(r.created_at),
            r.version,
            _encode(r),
        )

    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        async def work(conn: Conn) -> RefundCreated | OverRefund:
            async with conn.transaction():
                await conn.execute(
                    self._sql("lock"),
                    f"x402srv-refunds:{refund.purchase_id}",
                )
                known = await conn.fetchval(self._sql("by_id"), refund.refund_id)
                if known is not None:
                    return RefundCreated(_decode(known), created=False)
                held = await conn.fetchval(
                    self._sql("held"),
                    refund.purchase_id,
                )
                left = paid - int(held)
                if refund.value > left:
                    return OverRefund(refund.purchase_id, max(0, left))
                await self._insert(conn, refund)
                return RefundCreated(refund)

        return await self._run("create_refund", work)

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        async def work(conn: Conn) -> RefundMoved | RefundMismatch:
            for _ in range(MAX_ROUNDS):
                text = await conn.fetchval(self._sql("by_id"), move.refund_id)
                current = _decode(text) if text is not None else None
                decided = decide_move(current, move)
                if isinstance(decided, RefundMismatch) or current is None:
                    return decided
                record = decided.record
                status = await conn.execute(
                    self._sql("update"),
                    record.refund_id,
                    record.state.value,
                    record.version,
                    _encode(record),
                    current.version,
                )
                if status.endswith(" 1"):
                    return decided
            raise StoreUnavailable("The store is busy; retry shortly.", retry_after=1)

        return await self._run("move_refund", work)

    async def get_refund(self, refund_id: str) -> RefundRecord | None:
        if not storable(refund_id):
            return None
        text = await self._run(
            "get_refund",
            lambda conn: conn.fetchval(self._sql("by_id"), refund_id),
        )
        return _decode(text) if text is not None else None

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        where: list[str] = []
        args: list[object] = []
        if purchase_id is not None:
            if not storable(purchase_id):
                return []
            args.append(purchase_id)
            where.append(f"purchase_id = ${len(args)}")
        if states is not None:
            args.append([s.value for s in states])
            where.append(f"state = ANY(${len(args)}::text[])")
        if after is not None:
            args += [float(after[0]), after[1]]
            where.append(f"(created_at, refund_id) > (${len(args) - 1}, ${len(args)})")
        args.append(max(0, limit))
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = self._sql("select") + f"{clause} ORDER BY created_at, refund_id LIMIT ${len(args)}"
        rows = await self._run("list_refunds", lambda conn: conn.fetch(sql, *args))
        return [_decode(row["record"]) for row in rows]

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        async def work(conn: Conn) -> None:
            async with conn.transaction():
                for refund in refunds:
                    exists = await conn.fetchval(self._sql("by_id"), refund.refund_id)
                    if exists:
                        raise ValueError(f"refund {refund.refund_id} exists")
                    await self._insert(conn, refund)

        await self._run("import_refunds", work)
