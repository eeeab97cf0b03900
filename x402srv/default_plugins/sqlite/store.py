"""Built-in plugin: the ``sqlite`` store, the embedded default.

One file shared safely by several worker processes: WAL journal (readers never
wait for the writer), a busy timeout (a writer waits for another process's
write instead of failing), and ``BEGIN IMMEDIATE`` around every
read-then-write (``ops``). Tables and pragmas live in ``schema``.

sqlite3 calls block, so each store owns one thread that owns its connection;
every store method is one hop to that thread running one transaction, and the
event loop never waits on the disk. Operations queue on that thread in the
order they were called, except that claim-free challenge inserts (one per
unpaid request) and the credit steps of metered calls (``spend``, ``refund``,
``settle``) are group-committed: whatever of one kind is queued when the
thread gets to it goes into one transaction (``batch``). A caller cancelled while
its operation runs does not undo it: the transaction still commits or rolls
back as a whole.

The one exception to "the loop never touches the file": with ``synchronous =
"NORMAL"``, a credit step runs on the event loop itself, on a connection of its
own that waits for no lock (``_step``), whenever no other step is queued: a
commit is then a write into the WAL with no fsync (the WAL's restarts are the
checkpoint thread's), and a lock held by any other writer sends the step to the
store's thread as usual. A metered call's reservation and settlement then cost
no thread hops and no wait for the GIL.

WAL checkpoints run on a thread of their own (``checkpoint``), so no
commit of the store's thread stops to copy the WAL back and fsync.

Any sqlite failure (locked past the busy timeout, disk full, corrupt or
missing file) becomes ``StoreUnavailable``; the file path and sqlite's message
go to the log only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, field_validator

from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.config.fields import PluginOptions
from x402srv.default_plugins.sqlite import credits as credits_ops
from x402srv.default_plugins.sqlite import dump, ops, reports
from x402srv.default_plugins.sqlite import refunds as refund_ops
from x402srv.default_plugins.sqlite.batch import (
    Created,
    GroupCommit,
    PendingInsert,
    PendingStep,
    deliver,
)
from x402srv.default_plugins.sqlite.checkpoint import SAFETY_NET_PAGES, Checkpointer
from x402srv.default_plugins.sqlite.schema import StoreConnection, Synchronous, connect
from x402srv.errors import ConfigError, StoreUnavailable
from x402srv.hookspecs import Register, hookimpl
from x402srv.interfaces import (
    CreditAccount,
    Credited,
    ExportItem,
    Lease,
    PaymentClaimed,
    RateWindow,
    Spend,
    Store,
    TransitionRequest,
    UsedCall,
)
from x402srv.interfaces import TransitionResult as Result
from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import OverRefund, RefundCreated, RefundMismatch, RefundMoved
from x402srv.server.plugin_context import PluginContext
from x402srv.stores.rules import nameable

__all__ = ["SqliteOptions", "SqliteStore", "build_sqlite_store"]

_log = logging.getLogger("x402srv.store.sqlite")

T = TypeVar("T")

_UNAVAILABLE = "The store could not be reached; retry later."


class SqliteOptions(PluginOptions):
    """``[store.sqlite]``.

    ``synchronous = "NORMAL"`` (default) keeps every committed transaction
    across a crash of the process, which is what WAL guarantees without an
    fsync per commit; a power loss or OS crash may lose the last commits.
    ``"FULL"`` fsyncs every commit and survives power loss, at a cost per
    write. ``busy_timeout_ms`` is how long a write waits for another
    process's write before the request fails with 503.
    """

    synchronous: Synchronous = "NORMAL"
    busy_timeout_ms: int = Field(default=5000, ge=0, le=600_000)

    @field_validator("synchronous", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


#: Seconds a credit step waits before each new try on the loop's connection when
#: another writer holds the lock; after the last it queues for the store's thread.
INLINE_PAUSES: tuple[float, ...] = (0.0005, 0.001, 0.002)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """(a queued step whose caller left: its outcome is dropped, and so not logged)"""
    if not future.cancelled():
        future.exception()


class SqliteStore:
    """Challenge records, claims and leases in one sqlite file."""

    name = "sqlite"

    def __init__(self, path: Path, options: SqliteOptions | None = None) -> None:
        self.path = path
        self.options = options or SqliteOptions()
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # used only on the executor thread
        self._inserts: GroupCommit[PendingInsert] = GroupCommit()
        self._steps: GroupCommit[PendingStep] = GroupCommit()
        self._checkpointer = Checkpointer(path)
        # The event loop's own connection, for credit steps it runs itself (``_step``).
        self._inline: StoreConnection | None = None
        self._inline_lock = threading.Lock()  # (one user at a time, whatever its thread)

    async def start(self) -> None:
        if self._executor is not None:
            return
        # Set before the first await: operations called meanwhile queue behind
        # the connect on the same thread instead of finding no store.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="x402srv-sqlite")
        try:
            await self._submit("open", self._connect)
        except BaseException:
            await self.close()
            raise
        self._checkpointer.start()

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(None, self._checkpointer.stop)
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._disconnect)
        finally:
            executor.shutdown(wait=False)

    async def ping(self) -> None:
        await self._run("ping", ops.ping)

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        if claim_payment is not None:  # rare (discovery-first purchases): its own transaction
            key = str(claim_payment)
            return await self._run(
                "create_challenge", lambda c: ops.create_challenge(c, record, key)
            )
        executor = self._executor
        if executor is None:
            _log.error("sqlite store %s: create_challenge called while closed", self.path)
            raise _unavailable()
        future: asyncio.Future[Created] = asyncio.get_running_loop().create_future()
        insert = PendingInsert(record, ops.challenge_row(record), future)
        self._inserts.submit(insert, executor, self._drain_inserts, _unavailable)
        return await future

    def _drain_inserts(self) -> None:
        """Store's thread: commit queued inserts batch by batch until none is left."""
        while batch := self._inserts.take():
            self._checkpointer.ran(len(batch))
            try:
                conn = self._connection("create_challenge")
                outcomes: list[Created | BaseException] = list(
                    ops.create_challenges(conn, [(i.record, i.row) for i in batch])
                )
            except sqlite3.Error as exc:
                _log.error("sqlite store %s: create_challenge failed: %s", self.path, exc)
                outcomes = [_unavailable() for _ in batch]
            except BaseException as exc:  # StoreUnavailable, or a bug: every caller hears it
                outcomes = [exc for _ in batch]
            deliver(batch, outcomes)

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        if not nameable(challenge_id):
            return None
        return await self._run("get_challenge", lambda c: ops.get_challenge(c, challenge_id))

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        if not nameable(request_id):
            return None
        return await self._run("get_by_request_id", lambda c: ops.get_by_request_id(c, request_id))

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        text = str(key)
        if not nameable(text):
            return None
        return await self._run("get_by_payment", lambda c: ops.get_by_payment(c, text))

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        if not nameable(tx_hash):
            return None
        return await self._run("get_by_tx_hash", lambda c: ops.get_by_tx_hash(c, tx_hash))

    async def transition(self, request: TransitionRequest) -> Result:
        return await self._run("transition", lambda c: ops.transition(c, request))

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        query = ops.listing_query(states, updated_before, after, limit)
        if query is None:
            return []
        return await self._run("list_challenges", lambda c: ops.list_challenges(c, *query))

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        return await self._run("prune", lambda c: ops.prune(c, states, updated_before, limit))

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        return await self._run(
            "save_task", lambda c: ops.save_task(c, task_id, document, expect_version, prune_after)
        )

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        if not nameable(task_id):
            return None
        return await self._run("get_task", lambda c: ops.get_task(c, task_id))

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        return await self._run("prune_tasks", lambda c: ops.prune_tasks(c, before, limit))

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        if not hits:
            return {}
        pairs = [(key, int(delta)) for key, delta in hits.items()]
        return await self._run("count_hits", lambda c: ops.count_hits(c, pairs, window_end, now))

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        return await self._run(
            "credit", lambda c: credits_ops.credit(c, grant_id, amount, key, now, keep_until)
        )

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
        spent: Spend = await self._step(
            "spend",
            lambda c: credits_ops.spend(c, grant_id, cost, now, keep_until, rate, credits),
            skip_if_cancelled=True,
        )
        return spent

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        balance: int | None = await self._step(
            "refund", lambda c: credits_ops.refund(c, grant_id, amount, now)
        )
        return balance

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        balance: int | None = await self._step(
            "settle", lambda c: credits_ops.settle(c, grant_id, release, now, call)
        )
        return balance

    async def _step(
        self,
        op: str,
        step: Callable[[sqlite3.Connection], Any],
        *,
        skip_if_cancelled: bool = False,
    ) -> Any:
        """One credit step: run here when nothing else writes, else queued for a group commit.

        Here (``_step_inline``) when no step is queued or being committed and no
        other writer holds the lock; otherwise it queues for the store's thread
        (``batch``), behind the steps already there. A hop to the thread and
        back is two thread wake-ups on a quiet loop (0.6-1.0 ms of a metered
        stream's 3 ms first byte on a loaded 2-core machine; 0.24 ms here), and
        on a busy loop far worse: the thread takes the GIL back after each
        sqlite call only when the loop lets it go, so under load a reservation
        and a settlement each waited ~10 ms (p50) for it, and the streams
        waiting with them cut metered throughput by a fifth. Here they take
        0.06 and 0.1 ms.

        A lock held by another writer (another worker's step, which holds it for
        about as long) is usually free again within a millisecond: the step
        tries again here after ``INLINE_PAUSES``, and queues only after the
        last. Queued at once, one worker of two sent about one step in eight to
        its thread (docs/performance.md, "The sqlite store's write lock"). A
        step whose caller is cancelled during a pause is queued all the same
        unless it is a spend (``skip_if_cancelled``): as for a queued step, a
        refund once asked for is made (even as the store closes), or logged as
        not made.
        """
        executor = self._executor
        if executor is None:
            _log.error("sqlite store %s: %s called while the store is closed", self.path, op)
            raise _unavailable()
        if self._inline is not None:
            for pause in (0.0, *INLINE_PAUSES):
                if pause:
                    try:
                        await asyncio.sleep(pause)
                    except asyncio.CancelledError:
                        if not skip_if_cancelled:
                            # (the executor it began with: a store closing meanwhile has
                            # let go of it, but its thread runs what is queued before
                            # the file closes, as for a step not cancelled)
                            queued = self._queue_step(op, step, executor, skip_if_cancelled)
                            queued.add_done_callback(functools.partial(self._unheard, op))
                        raise
                if not self._steps.try_inline():
                    break  # (steps are queued for the thread: this one joins them)
                try:
                    ran, outcome = self._step_inline(op, step)
                finally:
                    self._steps.end_inline(executor, self._drain_steps, _unavailable)
                if ran:
                    if isinstance(outcome, BaseException):
                        raise outcome
                    return outcome
        return await self._queue_step(op, step, executor, skip_if_cancelled)

    def _queue_step(
        self,
        op: str,
        step: Callable[[sqlite3.Connection], Any],
        executor: ThreadPoolExecutor,
        skip_if_cancelled: bool,
    ) -> asyncio.Future[Any]:
        """``step`` queued for the store's thread: the future of its outcome."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieved)
        pending = PendingStep(op, step, future, skip_if_cancelled)
        self._steps.submit(pending, executor, self._drain_steps, _unavailable)
        return future

    def _unheard(self, op: str, future: asyncio.Future[Any]) -> None:
        """A step whose caller left failed: logged, as nobody else will hear of it."""
        if not future.cancelled() and (error := future.exception()) is not None:
            _log.error("sqlite store %s: %s whose caller left not made: %s", self.path, op, error)

    def _step_inline(self, op: str, step: Callable[[sqlite3.Connection], Any]) -> tuple[bool, Any]:
        """(True, outcome): ``step`` ran in a transaction of its own on the loop's connection.

        (False, None) when another writer holds the write lock (this connection
        waits for nobody): nothing was written, and the caller queues the step.
        """
        conn = self._inline
        if conn is None or not self._inline_lock.acquire(blocking=False):
            return False, None
        try:
            (outcome,) = credits_ops.in_one_transaction(conn, [step])
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
                return False, None  # (rolled back, if it got as far as a transaction)
            _log.error("sqlite store %s: %s failed: %s", self.path, op, exc)
            return True, _unavailable()
        except sqlite3.Error as exc:
            _log.error("sqlite store %s: %s failed: %s", self.path, op, exc)
            return True, _unavailable()
        finally:
            self._inline_lock.release()
        self._checkpointer.ran()
        return True, outcome

    def _drain_steps(self) -> None:
        """Store's thread: run queued credit steps batch by batch until none is left."""
        while batch := self._steps.take():
            # (read across threads: a cancellation that lands after this runs the step,
            # as one that lands while a step runs always did)
            batch = [p for p in batch if not (p.skip_if_cancelled and p.future.cancelled())]
            if not batch:
                continue
            self._checkpointer.ran(len(batch))
            try:
                conn = self._connection(batch[0].op)
                outcomes: list[object] = list(
                    credits_ops.in_one_transaction(conn, [p.step for p in batch])
                )
            except sqlite3.Error as exc:
                ops_named = ", ".join(sorted({p.op for p in batch}))
                _log.error("sqlite store %s: %s failed: %s", self.path, ops_named, exc)
                outcomes = [_unavailable() for _ in batch]
            except BaseException as exc:  # StoreUnavailable, or a bug: every caller hears it
                outcomes = [exc for _ in batch]
            deliver(batch, outcomes)

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        if not nameable(grant_id):
            return None
        return await self._run("get_credits", lambda c: credits_ops.get_credits(c, grant_id))

    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        return await self._run("create_refund", lambda c: refund_ops.create(c, refund, paid))

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        return await self._run("move_refund", lambda c: refund_ops.move(c, move))

    async def get_refund(self, refund_id: str) -> RefundRecord | None:
        if not nameable(refund_id):
            return None
        return await self._run("get_refund", lambda c: refund_ops.get(c, refund_id))

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        return await self._run(
            "list_refunds",
            lambda c: refund_ops.listing(c, purchase_id, states, after, limit),
        )

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        await self._run("import_refunds", lambda c: refund_ops.import_refunds(c, refunds))

    async def export_items(self) -> AsyncIterator[ExportItem]:
        """Page by page (``dump``): challenges, tasks, credit accounts, leases."""
        for kind in ("challenges", "tasks", "credits", "leases"):
            after = ""
            while True:
                page, after = await self._run("export", functools.partial(_page, kind, after))
                for item in page:
                    yield item
                if len(page) < dump.PAGE:
                    break

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        await self._run("import", lambda c: dump.import_items(c, items, now))

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        return await self._run(
            "acquire_lease", lambda c: ops.acquire_lease(c, name, holder, ttl, now)
        )

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        return await self._run("release_lease", lambda c: ops.release_lease(c, lease, value))

    async def held_lease(self, name: str, now: float) -> Lease | None:
        return await self._run("held_lease", lambda c: ops.held_lease(c, name, now))

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        return await self._run(
            "take_over_lease", lambda c: ops.take_over_lease(c, held, holder, ttl, now)
        )

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        if payer is not None and not nameable(payer):
            return []
        if before is not None and not nameable(before[1]):
            return []
        return await self._run(
            "find_challenges",
            lambda c: reports.find_challenges(c, states, payer, before, limit),
        )

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        rows = [(int(bucket), name, int(delta)) for (bucket, name), delta in counts.items()]
        await self._run("add_counts", lambda c: reports.add_counts(c, rows, int(forget_before)))

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        return await self._run(
            "read_counts", lambda c: reports.read_counts(c, int(start), int(end))
        )

    async def _run(self, op: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """One hop to the store's thread; ``fn`` runs there with the connection."""
        return await self._submit(op, lambda: fn(self._connection(op)))

    async def _submit(self, op: str, job: Callable[[], T]) -> T:
        executor = self._executor
        if executor is None:
            _log.error("sqlite store %s: %s called while the store is closed", self.path, op)
            raise _unavailable()
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(executor, self._guarded, op, job)
        except RuntimeError:  # closed between the check and the submit
            _log.error("sqlite store %s: %s called while the store closed", self.path, op)
            raise _unavailable() from None
        return await future

    def _guarded(self, op: str, job: Callable[[], T]) -> T:
        """Runs on the store's thread; converts every sqlite error at the boundary."""
        self._checkpointer.ran()
        try:
            return job()
        except sqlite3.Error as exc:
            _log.error("sqlite store %s: %s failed: %s", self.path, op, exc)
            raise _unavailable() from None

    def _connection(self, op: str) -> sqlite3.Connection:
        if self._conn is None:
            _log.error("sqlite store %s: %s called but the file is not open", self.path, op)
            raise _unavailable()
        return self._conn

    def _connect(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the directory for {self.path}: {exc.strerror}", path="store.path"
            ) from None
        self._conn = connect(
            self.path,
            synchronous=self.options.synchronous,
            busy_timeout_ms=self.options.busy_timeout_ms,
            autocheckpoint_pages=SAFETY_NET_PAGES,
        )
        if self.options.synchronous == "NORMAL":  # (FULL: every commit waits for an fsync)
            inline = connect(
                self.path,
                synchronous="NORMAL",
                busy_timeout_ms=self.options.busy_timeout_ms,
                autocheckpoint_pages=SAFETY_NET_PAGES,
                check_same_thread=False,
            )
            inline.execute("PRAGMA busy_timeout = 0")  # a held lock: queue the step instead
            inline.busy_timeout_ms = 0
            self._inline = inline

    def _disconnect(self) -> None:
        with self._inline_lock:
            inline, self._inline = self._inline, None
        for conn in (self._conn, inline):
            if conn is None:
                continue
            try:
                conn.close()
            except sqlite3.Error as exc:
                _log.warning("sqlite store %s: close failed: %s", self.path, exc)
        self._conn = None


def _page(kind: str, after: str, conn: sqlite3.Connection) -> tuple[list[ExportItem], str]:
    return dump.export_page(conn, kind, after)


def _unavailable() -> StoreUnavailable:
    """As ``raise StoreUnavailable(...) from None``: no sqlite error chained to it."""
    error = StoreUnavailable(_UNAVAILABLE, retry_after=1)
    error.__suppress_context__ = True
    return error


def build_sqlite_store(ctx: PluginContext) -> SqliteStore:
    """``[store] path`` is relative to the config file's directory."""
    options = ctx.parse_options(SqliteOptions)
    raw = ctx.config.store.path
    if not raw.strip():
        raise ConfigError("must name the sqlite file", path="store.path")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = ctx.config.base_dir / path
    return SqliteStore(path.absolute(), options)


@hookimpl
def register_stores(register: Register[Store]) -> None:
    register("sqlite", build_sqlite_store)
