"""The PostgreSQL store's credit methods (``CreditStore``), mixed into ``PostgresStore``.

Like transitions, each is optimistic compare-and-set: read the account and its
``version``, decide with x402srv's own credit rules (``apply_credit``,
``apply_spend``, ``apply_refund``, ``apply_settle``), and let ``save_account()``
(migrations/0002) write it only if the version did not move, together with
the credit's entry; else read again. A spend is two round trips and holds no
lock between them, so a metered call never waits for another one's network.

The primary key ``(grant_id, key)`` of ``credit_entries`` is what makes a
purchase or a top-up count once. Accounts past ``keep_until`` count as absent
(the rules say so); ``credit`` deletes a few of them at most once a second,
skipping any that is locked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from asyncpg import exceptions as pg

from x402srv.plugin import (
    CreditAccount,
    Credited,
    CreditEntry,
    RateWindow,
    Spend,
    UsedCall,
    apply_credit,
    apply_refund,
    apply_settle,
    apply_spend,
    decode_account,
    encode_account,
)

from .statements import Statements, storable

if TYPE_CHECKING:
    from .connection import Conn

__all__ = ["CreditMethods"]

T = TypeVar("T")

#: Rounds of read-decide-write one call may lose to other writers of the account.
MAX_ROUNDS = 64
#: ``save_account()`` found the entry of a credit it was to add (a lost race): read again.
CREDITED_BEFORE = "XC003"
#: Forgotten accounts deleted per sweep at most, and seconds between sweeps of one store.
SWEEP_ACCOUNTS, SWEEP_EVERY = 20, 1.0


class CreditMethods:
    """``credit``/``spend``/``refund``/``settle``/``get_credits`` over ``_run``."""

    sql: Statements
    _next_account_sweep: float = 0.0

    async def _run(self, op: str, work: Callable[[Conn], Awaitable[T]]) -> T:
        raise NotImplementedError

    def _lost_races(self, grant_id: str) -> Exception:
        raise NotImplementedError

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        sweep = now >= self._next_account_sweep
        if sweep:
            self._next_account_sweep = now + SWEEP_EVERY

        async def work(conn: Conn) -> Credited:
            if sweep:
                await conn.execute(self.sql.sweep_accounts, float(now), SWEEP_ACCOUNTS)
            for _ in range(MAX_ROUNDS):
                row = await conn.fetchrow(self.sql.account_for_credit, grant_id, key)
                stored = decode_account(row["account"]) if row is not None else None
                updated, answer = apply_credit(
                    stored,
                    grant_id,
                    amount,
                    key=key,
                    now=now,
                    keep_until=keep_until,
                    credited_before=row is not None and bool(row["credited"]),
                )
                if updated is None:
                    return answer
                entry = updated.entries[-1]
                saved = await self._save(conn, row, stored, updated, now, entry)
                if saved:
                    return answer
            raise self._lost_races(grant_id)

        return await self._run("credit", work)

    async def spend(
        self,
        grant_id: str,
        cost: int,
        *,
        now: float,
        keep_until: float,
        rate: RateWindow | None = None,
        credits: bool = True,
    ) -> Spend:
        async def work(conn: Conn) -> Spend:
            for _ in range(MAX_ROUNDS):
                row = await conn.fetchrow(self.sql.account, grant_id)
                stored = decode_account(row["account"]) if row is not None else None
                updated, answer = apply_spend(
                    stored,
                    grant_id,
                    cost,
                    now=now,
                    keep_until=keep_until,
                    rate=rate,
                    credits=credits,
                )
                if updated is None or await self._save(conn, row, stored, updated, now):
                    return answer
            raise self._lost_races(grant_id)

        return await self._run("spend", work)

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        async def work(conn: Conn) -> int | None:
            for _ in range(MAX_ROUNDS):
                row = await conn.fetchrow(self.sql.account, grant_id)
                stored = decode_account(row["account"]) if row is not None else None
                updated, balance = apply_refund(stored, amount, now=now)
                if updated is None or await self._save(conn, row, stored, updated, now):
                    return balance
            raise self._lost_races(grant_id)

        return await self._run("refund", work)

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        async def work(conn: Conn) -> int | None:
            for _ in range(MAX_ROUNDS):
                row = await conn.fetchrow(self.sql.account, grant_id)
                stored = decode_account(row["account"]) if row is not None else None
                updated, balance = apply_settle(stored, release, call, now=now)
                if updated is None or await self._save(conn, row, stored, updated, now):
                    return balance
            raise self._lost_races(grant_id)

        return await self._run("settle", work)

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        if not storable(grant_id):
            return None
        row = await self._run(
            "get_credits", lambda conn: conn.fetchrow(self.sql.account_with_entries, grant_id)
        )
        if row is None:
            return None
        entries = tuple(
            CreditEntry(str(k), int(a), float(at))
            for k, a, at in zip(row["keys"], row["amounts"], row["ats"], strict=True)
        )
        return replace(decode_account(row["account"]), entries=entries)

    async def _save(
        self,
        conn: Conn,
        row: Any,
        stored: CreditAccount | None,
        updated: CreditAccount,
        now: float,
        entry: CreditEntry | None = None,
    ) -> bool:
        """Write ``updated`` if the account is still as read; False: read again."""
        restart = stored is not None and stored.keep_until < now  # forgotten: start anew
        try:
            saved = await conn.fetchval(
                self.sql.save_account,
                updated.grant_id,
                None if row is None else row["version"],
                updated.keep_until,
                encode_account(updated, entries=False),
                restart,
                None if entry is None else entry.key,
                None if entry is None else entry.amount,
                None if entry is None else entry.at,
            )
        except pg.PostgresError as exc:
            if getattr(exc, "sqlstate", None) == CREDITED_BEFORE:
                return False
            raise
        return bool(saved)
