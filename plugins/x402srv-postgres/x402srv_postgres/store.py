"""The ``postgres`` store: a durable ledger that several x402srv instances share.

What the sqlite store guarantees across the processes of one host, PostgreSQL
guarantees across hosts, with its own tools:

- **Claims are primary keys.** ``payment_claims`` and ``tx_claims`` have one
  row per payment and txHash; the unique index, not a read in Python, keeps a
  second challenge out, and ``ON DELETE CASCADE`` takes a pruned record's
  claims with it.
- **Transitions are compare-and-set.** The store reads the record and its
  ``version``, decides with the same store rules (``x402srv.plugin``) every built-in store uses,
  computes the new record with ``ChallengeRecord.apply``, and the server-side
  function ``transition()`` writes it with ``UPDATE ... WHERE version = $n``
  together with its claims, in one round trip and one transaction. If the
  version moved, the store reads again.
- **Batches skip what is locked** (``statements``): pruning never waits for a
  request, and a request never waits for pruning.
- **Credits** of grants sold by the call are compare-and-set the same way
  (``credits``).
- **Leases** are one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (free,
  released or expired), with a fence that only grows; taking one over from a
  dead holder is one ``UPDATE ... WHERE`` on the holder and fence read.

A record is kept as the exact JSON text ``encode_record`` makes.
Every database or network error becomes ``StoreUnavailable`` (503 with
Retry-After) at this boundary (``connection``). The schema is checked when the
store starts and changed only by ``migrate`` (``schema``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from asyncpg import exceptions as pg

from x402srv.plugin import (
    ChallengeRecord,
    Coalescer,
    ConfigError,
    Lease,
    PaymentClaimed,
    PaymentKey,
    Secret,
    State,
    StateMismatch,
    StoreUnavailable,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
    TxClaimed,
    check_state,
    claim_keys,
    decode_record,
    decode_task,
    encode_record,
    encode_task,
    key_to_release,
    state_values,
    tx_claim_key,
)

from . import schema
from .connection import (
    RETRY_AFTER,
    UNAVAILABLE,
    DatabaseErrors,
    create_pool,
    describe,
    describe_dsn,
    is_config_problem,
    tls_context,
    unavailable,
)
from .credits import CreditMethods
from .dump import DumpMethods
from .options import PostgresOptions
from .refunds import RefundMethods
from .statements import Statements, storable

if TYPE_CHECKING:
    from .connection import Conn

__all__ = ["PostgresStore"]

log = logging.getLogger("x402srv_postgres")

T = TypeVar("T")

#: Rounds of read-decide-write one transition may lose to concurrent writers of
#: the same record before giving up; each lost round means another write won.
MAX_ROUNDS = 64
#: Challenge inserts committed by one statement at most; the rest go in the next one.
MAX_BATCH = 256
#: What ``create_challenge`` answers.
Created = tuple[ChallengeRecord, bool] | PaymentClaimed

#: SQLSTATEs ``transition()`` and ``create_claimed()`` raise: the claim's owner is the message.
PAYMENT_TAKEN, TX_TAKEN = "XC001", "XC002"
#: A deadlock (two moves releasing and claiming each other's keys) is retried like a lost race.
DEADLOCK = "40P01"
#: Expired counters deleted by one sweep at most, and seconds between sweeps of one store.
SWEEP_COUNTERS, SWEEP_EVERY = 1000, 1.0


class PostgresStore(CreditMethods, DumpMethods, RefundMethods):
    """A ``Store`` (and ``CreditStore``) on one PostgreSQL database, or a DSN that finds it."""

    name = "postgres"

    def __init__(self, dsn: Secret, options: PostgresOptions) -> None:
        self.dsn = dsn
        self.options = options
        self.schema = options.schema_name
        self.sql = Statements(options.schema_name)
        self._pool: asyncpg.Pool | None = None
        self._schema_checked = False
        self._next_sweep = 0.0
        self._next_account_sweep = 0.0
        self._creates: Coalescer[tuple[ChallengeRecord, tuple[Any, ...]], Created] = Coalescer(
            self._create_batch, max_batch=MAX_BATCH
        )

    def __repr__(self) -> str:
        return f"PostgresStore({describe_dsn(self.dsn.reveal())}, schema={self.schema!r})"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Build the pool and check the schema; a server that is down only warns.

        Wrong credentials, a missing database or a schema that needs
        ``x402srv migrate`` stop the start (the seller must act). A server that
        is down does not: requests answer 503 until it is back, and the schema
        is checked on the first connection then.
        """
        if self._pool is not None:
            return
        pool = create_pool(self.dsn.reveal(), self.options)
        await pool
        self._pool = pool
        try:
            async with pool.acquire(timeout=self.options.connect_timeout_seconds * 2) as conn:
                await self._check_schema(conn)
        except ConfigError:
            await self.close()
            raise
        except DatabaseErrors as exc:
            if is_config_problem(exc):
                await self.close()
                raise ConfigError(
                    f"PostgreSQL refused the connection: {describe(exc)} (DSN not shown)",
                    path="store.postgres.dsn",
                ) from None
            log.warning(
                "postgres store %s unreachable at start (%s); requests answer 503 until it is back",
                describe_dsn(self.dsn.reveal()),
                describe(exc),
            )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await pool.close()
        except DatabaseErrors as exc:
            log.warning("postgres store: close failed (%s)", describe(exc))
            pool.terminate()

    async def ping(self) -> None:
        await self._run("ping", lambda conn: conn.fetchval("SELECT 1"))

    async def migrate(self) -> list[str]:
        """``x402srv migrate``: its own connection, without ``start`` (which would refuse)."""
        try:
            conn = await asyncpg.connect(
                self.dsn.reveal(),
                timeout=self.options.connect_timeout_seconds,
                ssl=tls_context(self.options),
                server_settings={"application_name": "x402srv migrate"},
            )
        except DatabaseErrors as exc:
            if is_config_problem(exc):
                raise ConfigError(
                    f"PostgreSQL refused the connection: {describe(exc)} (DSN not shown)",
                    path="store.postgres.dsn",
                ) from None
            raise unavailable("migrate", self.dsn.reveal(), exc) from None
        try:
            return await schema.migrate(conn, self.schema)
        except DatabaseErrors as exc:
            if is_config_problem(exc):
                raise ConfigError(
                    f"the migration was refused: {describe(exc)}", path="store.postgres"
                ) from None
            raise unavailable("migrate", self.dsn.reveal(), exc) from None
        finally:
            await conn.close(timeout=5)

    async def _check_schema(self, conn: Conn) -> None:
        if not self._schema_checked:
            await schema.require(conn, self.schema)
            self._schema_checked = True

    # ------------------------------------------------------------ challenges

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        text = encode_record(record)
        row = (record.challenge_id, record.request_id, record.state.value, record.updated_at, text)
        if claim_payment is not None:
            key = str(claim_payment)
            return await self._run("create_challenge", lambda c: self._create_claimed(c, row, key))
        return await self._creates.submit((record, row))

    async def _create_batch(
        self, batch: list[tuple[ChallengeRecord, tuple[Any, ...]]]
    ) -> list[Created | Exception]:
        """One multi-row ``INSERT`` for ``batch`` (``batch``); each create decided as if alone.

        A row the insert skipped lost to an existing requestId (that record is
        the answer, created earlier in the batch or before it) or to an existing
        challengeId (a ``ValueError`` for that caller only).
        """

        async def work(conn: Conn) -> list[Created | Exception]:
            columns = [list(column) for column in zip(*(row for _, row in batch), strict=True)]
            inserted = {r[0] for r in await conn.fetch(self.sql.insert_challenges, *columns)}
            if len(inserted) == len(batch):
                return [(record, True) for record, _ in batch]
            lost = [record.request_id for record, _ in batch if record.challenge_id not in inserted]
            rows = await conn.fetch(self.sql.records_by_request, lost)
            existing = {r["request_id"]: r["record"] for r in rows}
            outcomes: list[Created | Exception] = []
            for record, _ in batch:
                text = existing.get(record.request_id)
                if record.challenge_id in inserted:
                    outcomes.append((record, True))
                elif text is not None:
                    outcomes.append((decode_record(text), False))
                else:
                    outcomes.append(
                        ValueError(f"challenge_id {record.challenge_id} already exists")
                    )
            return outcomes

        try:
            return await self._run("create_challenge", work)
        except StoreUnavailable:
            return [StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER) for _ in batch]

    async def _create_claimed(
        self, conn: Conn, row: tuple[Any, ...], key: str
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        for _ in range(MAX_ROUNDS):
            try:
                result = await conn.fetchrow(self.sql.create_claimed, *row, key)
            except pg.PostgresError as exc:
                owner = _claim_owner(exc, PAYMENT_TAKEN)
                if owner:
                    return PaymentClaimed(owner)
                if owner is None:
                    raise
                continue  # the owner let go of the claim meanwhile: try again
            assert result is not None
            if result["outcome"] == "created":
                return decode_record(row[4]), True
            if result["outcome"] == "exists":
                return decode_record(result["existing"]), False
            raise ValueError(f"challenge_id {row[0]} already exists")
        raise _lost_races(row[0])

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        return await self._record("get_challenge", self.sql.record_by_id, challenge_id)

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        return await self._record("get_by_request_id", self.sql.record_by_request, request_id)

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        return await self._record("get_by_payment", self.sql.record_by_payment, str(key))

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        return await self._record("get_by_tx_hash", self.sql.record_by_tx, tx_claim_key(tx_hash))

    async def _record(self, op: str, statement: str, key: str) -> ChallengeRecord | None:
        if not storable(key):
            return None
        text = await self._run(op, lambda conn: conn.fetchval(statement, key))
        return decode_record(text) if text is not None else None

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        return await self._run("transition", lambda conn: self._transition(conn, request))

    async def _transition(self, conn: Conn, request: TransitionRequest) -> TransitionResult:
        for _ in range(MAX_ROUNDS):
            row = await conn.fetchrow(self.sql.versioned_by_id, request.challenge_id)
            record = decode_record(row["record"]) if row is not None else None
            mismatch = check_state(record, request)
            if mismatch is not None:
                return mismatch
            assert record is not None  # check_state answers for a missing record
            assert row is not None
            updated = record.apply(request.changes, request.to, request.at, request.reason)
            claim, tx = claim_keys(request)
            try:
                outcome = await conn.fetchval(
                    self.sql.transition,
                    record.challenge_id,
                    row["version"],
                    updated.state.value,
                    updated.updated_at,
                    encode_record(updated),
                    claim,
                    tx,
                    key_to_release(record, request),
                )
            except pg.PostgresError as exc:
                if (owner := _claim_owner(exc, PAYMENT_TAKEN)) is not None:
                    if owner:
                        return PaymentClaimed(owner)
                    continue
                if (owner := _claim_owner(exc, TX_TAKEN)) is not None:
                    if owner:
                        return TxClaimed(owner)
                    continue
                if getattr(exc, "sqlstate", None) == DEADLOCK:
                    continue
                raise
            if outcome == "applied":
                return TransitionApplied(updated)
            if outcome == "missing":
                return StateMismatch(None)
            # "stale": another write landed between our read and our update.
        raise _lost_races(request.challenge_id)

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        args: list[Any] = [max(limit, 0)]
        if states is not None:
            wanted = state_values(states)
            if not wanted:
                return []
            args.append(wanted)
        if updated_before is not None:
            args.append(float(updated_before))
        if after is not None:
            if not storable(after[1]):
                return []
            args += [float(after[0]), after[1]]
        statement = self.sql.listing(
            states=states is not None, before=updated_before is not None, after=after is not None
        )
        rows = await self._run("list_challenges", lambda conn: conn.fetch(statement, *args))
        return [decode_record(row[0]) for row in rows]

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        wanted = state_values(states)
        if not wanted or limit <= 0:
            return 0
        return int(
            await self._run(
                "prune",
                lambda conn: conn.fetchval(self.sql.prune, wanted, float(updated_before), limit),
            )
        )

    # ------------------------------------------------------------ tasks

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        text = encode_task(document)  # before any I/O: a bad document changes nothing
        if not storable(task_id):
            raise ValueError("a task id must be UTF-8 text without NUL")
        after = None if prune_after is None else float(prune_after)
        args: tuple[Any, ...] = (task_id, text, after)
        statement = self.sql.create_task
        if expect_version is not None:
            statement, args = self.sql.replace_task, (*args, int(expect_version))
        version = await self._run("save_task", lambda conn: conn.fetchval(statement, *args))
        return int(version) if version is not None else None

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        if not storable(task_id):
            return None
        row = await self._run("get_task", lambda conn: conn.fetchrow(self.sql.task, task_id))
        return (decode_task(row["document"]), int(row["version"])) if row is not None else None

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        return int(
            await self._run(
                "prune_tasks",
                lambda conn: conn.fetchval(self.sql.prune_tasks, float(before), limit),
            )
        )

    # ------------------------------------------------------------ hit counters

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        """One statement for every key of the call; at most once a second a sweep before it.

        Keys are sorted so that two calls lock their rows in the same order
        (no deadlock); the sweep skips locked rows and waits for nothing.
        """
        if not hits:
            return {}
        keys = sorted(hits)
        deltas = [int(hits[key]) for key in keys]
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_EVERY

        async def add(conn: Conn) -> list[asyncpg.Record]:
            if sweep:
                await conn.execute(self.sql.sweep_counters, float(now), SWEEP_COUNTERS)
            return await conn.fetch(self.sql.add_hits, float(now), float(window_end), keys, deltas)

        rows = await self._run("count_hits", add)
        totals = {row["key"]: int(row["hits"]) for row in rows}
        return {key: totals[key] for key in hits}

    # ------------------------------------------------------------ the console

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        wanted = None if states is None else state_values(states)
        if wanted == [] or limit <= 0:
            return []
        if (payer is not None and not storable(payer)) or (
            before is not None and not storable(before[1])
        ):
            return []
        cursor: list[Any] = [] if before is None else [float(before[0]), before[1]]
        if payer is not None:
            statement = self.sql.find(by="payer", states=wanted is not None, before=bool(cursor))
            args: list[Any] = [limit, payer.lower(), *([wanted] if wanted else []), *cursor]
        elif wanted is not None:
            statement = self.sql.find(by="states", states=True, before=bool(cursor))
            args = [limit, wanted, *cursor]
        else:
            statement = self.sql.find(by="all", states=False, before=bool(cursor))
            args = [limit, *cursor]
        rows = await self._run("find_challenges", lambda conn: conn.fetch(statement, *args))
        return [decode_record(row["record"]) for row in rows]

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        """One transaction: a few old counters forgotten, every delta added."""
        ordered = sorted((int(b), name, int(n)) for (b, name), n in counts.items())

        async def add(conn: Conn) -> None:
            async with conn.transaction():
                await conn.execute(self.sql.forget_counts, int(forget_before), SWEEP_COUNTERS)
                if ordered:
                    buckets, names, deltas = (list(column) for column in zip(*ordered, strict=True))
                    await conn.execute(self.sql.add_counts, buckets, names, deltas)

        await self._run("add_counts", add)

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        rows = await self._run(
            "read_counts", lambda conn: conn.fetch(self.sql.read_counts, int(start), int(end))
        )
        return {(int(row["bucket"]), str(row["name"])): int(row["n"]) for row in rows}

    # ------------------------------------------------------------ leases

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        expires_at = now + ttl
        row = await self._run(
            "acquire_lease",
            lambda conn: conn.fetchrow(
                self.sql.acquire_lease, name, holder, float(expires_at), float(now)
            ),
        )
        if row is None:
            return None
        return Lease(name, holder, int(row["fence"]), expires_at, row["value"])

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        released = await self._run(
            "release_lease",
            lambda conn: conn.fetchval(
                self.sql.release_lease, value, lease.name, lease.fence, lease.holder
            ),
        )
        return bool(released)

    async def held_lease(self, name: str, now: float) -> Lease | None:
        row = await self._run(
            "held_lease", lambda conn: conn.fetchrow(self.sql.held_lease, name, float(now))
        )
        if row is None:
            return None
        return Lease(name, row["holder"], int(row["fence"]), float(row["expires_at"]), row["value"])

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        expires_at = now + ttl
        row = await self._run(
            "take_over_lease",
            lambda conn: conn.fetchrow(
                self.sql.take_over_lease,
                holder,
                float(expires_at),
                held.name,
                held.holder,
                held.fence,
            ),
        )
        if row is None:
            return None
        return Lease(held.name, holder, int(row["fence"]), expires_at, row["value"])

    # ------------------------------------------------------------ plumbing

    async def _run(self, op: str, work: Callable[[Conn], Awaitable[T]]) -> T:
        """``work`` on a pooled connection; database and network errors become 503."""
        pool = self._pool
        if pool is None:
            log.error("postgres store: %s called while the store is closed", op)
            raise StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
        try:
            async with pool.acquire(timeout=self.options.pool_timeout_seconds) as conn:
                await self._check_schema(conn)
                return await work(conn)
        except ConfigError as exc:
            # The schema fell behind while this worker ran (it started while the
            # server was down): the operator must migrate; requests get a 503.
            log.error("postgres store: %s refused: %s", op, exc)
            raise StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER) from None
        except DatabaseErrors as exc:
            raise unavailable(op, self.dsn.reveal(), exc) from None

    def _lost_races(self, key: str) -> StoreUnavailable:
        return _lost_races(key)


def _claim_owner(exc: BaseException, sqlstate: str) -> str | None:
    """The owner named by a claim refusal with ``sqlstate``; "" if it let go meanwhile."""
    if getattr(exc, "sqlstate", None) != sqlstate:
        return None
    return str(getattr(exc, "message", "") or "")


def _lost_races(challenge_id: str) -> StoreUnavailable:
    log.error("postgres store: a move of %s kept losing races", challenge_id)
    return StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
