"""The sqlite store: the store contract, its pragmas, its failures, and several processes.

The multi-process tests start real interpreters on one database file: the
guarantee that matters in production is across worker processes, which no
amount of asyncio concurrency inside one process can show.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import make_config
from tests.support.faults import locked
from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Config
from x402srv.default_plugins.sqlite import ops as sqlite_ops
from x402srv.default_plugins.sqlite import reports as sqlite_reports
from x402srv.default_plugins.sqlite import schema as sqlite_schema
from x402srv.default_plugins.sqlite import store as sqlite_store
from x402srv.default_plugins.sqlite.checkpoint import (
    IDLE_SECONDS,
    INTERVAL_SECONDS,
    MIN_OPERATIONS,
    SAFETY_NET_PAGES,
    Checkpointer,
    checkpoint,
)
from x402srv.default_plugins.sqlite.credits import TRIM_USED_CALLS_EVERY
from x402srv.default_plugins.sqlite.store import SqliteOptions, SqliteStore, build_sqlite_store
from x402srv.errors import ConfigError, StoreUnavailable
from x402srv.interfaces import CreditAccount, SpendOutcome, Store, TransitionApplied, UsedCall
from x402srv.server.plugin_context import PluginContext
from x402srv.server.registry import Registry
from x402srv.stores.credit_rules import USED_CALLS, encode_account
from x402srv.stores.rules import encode_record
from x402srv.testing import StoreContract
from x402srv.testing.builders import (
    BASE_TIME,
    make_grant,
    make_key,
    make_payment,
    make_record,
    new_tx_hash,
)
from x402srv.testing.store_contract import settling


class TestSqliteStore(StoreContract):
    durable = True

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[SqliteStore]:
        store = SqliteStore(tmp_path / "store.db")
        await store.start()
        yield store
        await store.close()

    def another_store(self, store: Store) -> Store:
        assert isinstance(store, SqliteStore)
        return SqliteStore(store.path, store.options)

    def fresh_store(self, store: Store) -> Store:
        assert isinstance(store, SqliteStore)
        return SqliteStore(store.path.with_name("fresh.db"), store.options)


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "store.db", SqliteOptions(busy_timeout_ms=100))
    await store.start()
    yield store
    await store.close()


async def _pragma(store: SqliteStore, name: str) -> Any:
    """Per-connection pragmas can only be read on the store's own connection."""
    return await store._run(name, lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0])


# ------------------------------------------------------------ configuration


def _config(tmp_path: Path, **store: Any) -> Config:
    """A config whose ``[store]`` is ``store``, with paths read from ``tmp_path``."""
    return make_config(base_dir=tmp_path, store=store)


def _build(config: Config) -> SqliteStore:
    ctx = PluginContext(
        config=config,
        name="sqlite",
        key_path="store.sqlite",
        options=config.store.plugin_options("sqlite"),
    )
    return build_sqlite_store(ctx)


async def test_registry_builds_it_with_the_path_beside_the_config(tmp_path: Path) -> None:
    config = _config(tmp_path, backend="sqlite", path="data/sub/x402srv.db")
    store = Registry(entry_points=False)._context("store", "store.backend", "sqlite", config)
    assert isinstance(store, SqliteStore)
    assert store.path == tmp_path / "data" / "sub" / "x402srv.db"
    await store.start()
    try:
        assert store.path.is_file()  # parent directories created on open
        record = make_record()
        await store.create_challenge(record)
        assert await store.get_challenge(record.challenge_id) == record
    finally:
        await store.close()


def test_default_path_and_absolute_path(tmp_path: Path) -> None:
    assert _build(_config(tmp_path)).path == tmp_path / "x402srv.db"
    elsewhere = tmp_path / "elsewhere" / "db.sqlite"
    assert _build(_config(tmp_path, path=str(elsewhere))).path == elsewhere


def test_options_are_validated_with_their_key_path(tmp_path: Path) -> None:
    store = _build(_config(tmp_path, sqlite={"synchronous": "full", "busy_timeout_ms": 250}))
    assert store.options == SqliteOptions(synchronous="FULL", busy_timeout_ms=250)
    with pytest.raises(ConfigError, match=r"store\.sqlite\.journal_mode: unknown key"):
        _build(_config(tmp_path, sqlite={"journal_mode": "DELETE"}))
    with pytest.raises(ConfigError, match=r"store\.sqlite\.synchronous"):
        _build(_config(tmp_path, sqlite={"synchronous": "OFF"}))
    with pytest.raises(ConfigError, match=r"store\.sqlite\.busy_timeout_ms"):
        _build(_config(tmp_path, sqlite={"busy_timeout_ms": -1}))
    with pytest.raises(ConfigError, match=r"store\.path"):
        _build(_config(tmp_path, path=" "))


# ------------------------------------------------------------ pragmas and schema


async def test_wal_busy_timeout_and_schema_version_are_set(opened: SqliteStore) -> None:
    assert await _pragma(opened, "journal_mode") == "wal"
    assert await _pragma(opened, "busy_timeout") == 100
    assert await _pragma(opened, "synchronous") == 1  # NORMAL
    other = sqlite3.connect(opened.path)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # kept in the file
        version = other.execute("PRAGMA user_version").fetchone()[0]
        assert version == sqlite_schema.SCHEMA_VERSION == 7
        tables = {row[0] for row in other.execute("SELECT name FROM sqlite_master")}
        expected = {"challenges", "payment_claims", "tx_claims", "leases", "tasks", "rate_counters"}
        expected |= {"credits", "credit_entries", "refunds", "used_calls"}
        assert expected <= tables
    finally:
        other.close()


async def test_synchronous_full_and_default_busy_timeout(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "full.db", SqliteOptions(synchronous="FULL"))
    await store.start()
    try:
        assert await _pragma(store, "synchronous") == 2  # FULL
        assert await _pragma(store, "busy_timeout") == 5000
    finally:
        await store.close()


async def test_workers_starting_together_on_a_new_file(tmp_path: Path) -> None:
    """Switching a new file to WAL can answer "locked" at once; every opener must retry."""
    for trial in range(40):
        stores = [SqliteStore(tmp_path / f"new-{trial}.db") for _ in range(8)]
        try:
            await asyncio.gather(*(store.start() for store in stores))
            assert [await _pragma(store, "journal_mode") for store in stores] == ["wal"] * 8
        finally:
            await asyncio.gather(*(store.close() for store in stores))


async def test_a_version_1_file_is_migrated_in_place(tmp_path: Path) -> None:
    """Files written before prune and tasks existed open, keep their data and gain both."""
    path = tmp_path / "v1.db"
    record = make_record(state=State.EXPIRED)
    key, tx = make_key(), new_tx_hash()
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in sqlite_schema._SCHEMA_V1:
        raw.execute(statement)
    raw.execute(
        "INSERT INTO challenges VALUES (?, ?, ?, ?, ?)",
        (
            record.challenge_id,
            record.request_id,
            "EXPIRED",
            record.updated_at,
            encode_record(record),
        ),
    )
    raw.execute("INSERT INTO payment_claims VALUES (?, ?)", (str(key), record.challenge_id))
    raw.execute("INSERT INTO tx_claims VALUES (?, ?)", (tx, record.challenge_id))
    raw.execute("PRAGMA user_version = 1")
    raw.close()

    store = SqliteStore(path)
    await store.start()
    try:
        assert await store.get_challenge(record.challenge_id) == record
        assert await store.get_by_payment(key) == record
        assert await store.get_by_tx_hash(tx) == record
        assert await store.save_task("t", {"status": "working"}, expect_version=None) == 1
        assert await store.prune(states=[State.EXPIRED], updated_before=record.updated_at + 1) == 1
        assert await store.get_by_payment(key) is None
        assert await store.get_by_tx_hash(tx) is None
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema.SCHEMA_VERSION
        indexes = {row[0] for row in check.execute("SELECT name FROM sqlite_master")}
        assert {"payment_claims_by_challenge", "tx_claims_by_challenge", "tasks"} <= indexes
    finally:
        check.close()


async def test_a_version_3_file_gains_credit_accounts(tmp_path: Path) -> None:
    """The previous release's files keep their records and counters and gain version 4."""
    path = tmp_path / "v3.db"
    record = make_record()
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in (*sqlite_schema._SCHEMA_V1, *sqlite_schema._SCHEMA_V2):
        raw.execute(statement)
    for statement in sqlite_schema._SCHEMA_V3:
        raw.execute(statement)
    raw.execute("INSERT INTO challenges VALUES (?, ?, ?, ?, ?)", _v3_row(record))
    raw.execute("PRAGMA user_version = 3")
    raw.close()

    store = SqliteStore(path)
    await store.start()
    try:
        assert await store.get_challenge(record.challenge_id) == record
        credited = await store.credit("g", 5, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
        assert (credited.balance, credited.applied) == (5, True)
        spent = await store.spend("g", 2, now=BASE_TIME, keep_until=BASE_TIME + 60)
        assert spent.balance == 3
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema.SCHEMA_VERSION
        schema = dict(check.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        assert "WITHOUT ROWID" in schema["credits"]
        assert "UNIQUE (grant_id, key)" in schema["credit_entries"]
        assert "credits_by_keep_until" in schema
    finally:
        check.close()


async def test_forgotten_accounts_leave_the_file(tmp_path: Path) -> None:
    """Each credit deletes some accounts past keep_until: the table holds the live grants."""
    store = SqliteStore(tmp_path / "store.db")
    await store.start()
    try:
        for i in range(30):
            await store.credit(f"old-{i}", 1, key="k", now=BASE_TIME, keep_until=BASE_TIME + 10)
        later = BASE_TIME + 100
        await store.credit("new-1", 1, key="k", now=later, keep_until=later + 10)
        await store.credit("new-2", 1, key="k", now=later, keep_until=later + 10)
    finally:
        await store.close()
    check = sqlite3.connect(tmp_path / "store.db")
    try:
        grants = sorted(row[0] for row in check.execute("SELECT grant_id FROM credits"))
        keys = check.execute("SELECT count(*) FROM credit_entries").fetchone()[0]
    finally:
        check.close()
    assert grants == ["new-1", "new-2"]
    assert keys == 2


async def test_a_version_2_file_is_migrated_in_place(tmp_path: Path) -> None:
    """Version 2 files keep their records and tasks and gain version 3 (and what follows)."""
    path = tmp_path / "v2.db"
    record = make_record(at=BASE_TIME + 0.1)
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in (*sqlite_schema._SCHEMA_V1, *sqlite_schema._SCHEMA_V2):
        raw.execute(statement)
    raw.execute("INSERT INTO challenges VALUES (?, ?, ?, ?, ?)", _v3_row(record))
    raw.execute("INSERT INTO tasks VALUES (?, ?, ?)", ("old-task", 4, '{"status":"working"}'))
    raw.execute("PRAGMA user_version = 2")
    raw.close()

    store = SqliteStore(path)
    await store.start()
    try:
        assert await store.get_task("old-task") == ({"status": "working"}, 4)
        assert await store.get_challenge(record.challenge_id) == record
        assert await store.list_challenges(states=[State.PENDING]) == [record]
        cursor = (record.updated_at, record.challenge_id)
        assert await store.list_challenges(states=[State.PENDING], after=cursor) == []
        assert await store.prune_tasks(before=BASE_TIME + 10**9) == 0  # old tasks: never
        resaved = await store.save_task(
            "old-task", {"status": "done"}, expect_version=4, prune_after=BASE_TIME
        )
        assert resaved == 5
        assert await store.prune_tasks(before=BASE_TIME + 1) == 1
        counted = await store.count_hits({"k": 2}, window_end=BASE_TIME + 60, now=BASE_TIME)
        assert counted == {"k": 2}
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema.SCHEMA_VERSION
        schema = dict(check.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        assert "(state, updated_at, challenge_id)" in schema["challenges_by_state"]
        assert "(updated_at, challenge_id)" in schema["challenges_by_updated"]
        assert "WHERE prune_after IS NOT NULL" in schema["tasks_by_prune_after"]
        assert "WITHOUT ROWID" in schema["rate_counters"]
        assert "rate_counters_by_window_end" in schema
    finally:
        check.close()


async def _plan(store: SqliteStore, query: tuple[str, list[Any]] | None) -> list[str]:
    assert query is not None
    sql, params = query
    return await store._run(
        "plan", lambda conn: [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    )


async def test_a_listing_page_is_one_index_range(opened: SqliteStore) -> None:
    """The reconciler's pages (one state, age bound, cursor) read a range and sort nothing."""
    cursor = (BASE_TIME, "some-challenge-id")
    cases = [
        ([State.SETTLING], BASE_TIME + 9, cursor, "challenges_by_state", ")>(?,?)"),
        (None, None, cursor, "challenges_by_updated", ")>(?,?)"),
        ([State.PAID], BASE_TIME + 9, None, "challenges_by_state", "updated_at<?"),
    ]
    for states, before, after, index, condition in cases:
        plan = await _plan(opened, sqlite_ops.listing_query(states, before, after, 100))
        assert len(plan) == 1, plan
        assert f"SEARCH challenges USING INDEX {index} (" in plan[0]
        assert condition in plan[0]


async def test_task_pruning_reads_only_the_partial_index(opened: SqliteStore) -> None:
    plan = await _plan(opened, (sqlite_ops._PRUNE_TASKS, [BASE_TIME, 100]))
    assert any("USING COVERING INDEX tasks_by_prune_after (prune_after<?)" in p for p in plan)
    assert not any(p.startswith("SCAN") for p in plan), plan


async def test_counters_of_ended_windows_are_deleted_a_batch_per_call(
    opened: SqliteStore,
) -> None:
    """The table stays bounded, and no call pays for deleting a whole window at once."""
    batch = sqlite_ops.SWEEP_COUNTERS
    old = {f"old-{i}": 1 for i in range(batch * 2 + 50)}
    assert await opened.count_hits(old, window_end=BASE_TIME + 60, now=BASE_TIME) == old

    async def rows() -> int:
        count = "SELECT count(*) FROM rate_counters"
        return int(await opened._run("rows", lambda conn: conn.execute(count).fetchone()[0]))

    later = BASE_TIME + 61
    for expected in (len(old) - batch + 1, len(old) - 2 * batch + 1, 1):
        await opened.count_hits({"new": 1}, window_end=later + 60, now=later)
        assert await rows() == expected
    plan = await _plan(opened, (sqlite_ops._SWEEP_COUNTERS, [later, batch]))
    assert any("INDEX rate_counters_by_window_end (window_end<?)" in p for p in plan), plan


async def test_many_keys_in_one_call_are_counted_together(opened: SqliteStore) -> None:
    """More keys than one statement takes: still one transaction, every total returned."""
    hits = {f"client-{i}": i % 7 + 1 for i in range(450)}
    assert await opened.count_hits(hits, window_end=BASE_TIME + 60, now=BASE_TIME) == hits
    doubled = {key: 2 * n for key, n in hits.items()}
    assert await opened.count_hits(hits, window_end=BASE_TIME + 60, now=BASE_TIME) == doubled


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(ConfigError, match="schema version 99") as caught:
        await SqliteStore(path).start()
    assert caught.value.path == "store.path"


# ------------------------------------------------------------ failures become StoreUnavailable


def _assert_hidden(exc: BaseException, path: Path) -> None:
    """What a client could see: no path, no sqlite message, no chained library error."""
    assert isinstance(exc, StoreUnavailable)
    assert str(path) not in str(exc)
    assert exc.__suppress_context__
    assert exc.to_problem()["code"] == "STORE_UNAVAILABLE"


async def test_a_parent_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("not a directory")
    store = SqliteStore(tmp_path / "plain-file" / "x402srv.db")
    with pytest.raises(ConfigError) as caught:
        await store.start()
    assert caught.value.path == "store.path"
    with pytest.raises(StoreUnavailable):
        await store.ping()


@pytest.mark.parametrize("kind", ["directory", "corrupt"])
async def test_unusable_files_are_store_unavailable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    path = tmp_path / "x402srv.db"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"this is not a database file " * 200)
    store = SqliteStore(path)
    with (
        caplog.at_level(logging.ERROR, logger="x402srv.store.sqlite"),
        pytest.raises(StoreUnavailable) as caught,
    ):
        await store.start()
    _assert_hidden(caught.value, path)
    assert str(path) in caplog.text  # the operator learns which file
    with pytest.raises(StoreUnavailable):
        await store.get_challenge("any")
    await store.close()


async def test_locked_past_the_busy_timeout(opened: SqliteStore) -> None:
    record = make_record()
    await opened.create_challenge(record)
    with locked(opened.path):
        with pytest.raises(StoreUnavailable) as caught:
            await opened.create_challenge(make_record())
        _assert_hidden(caught.value, opened.path)
        with pytest.raises(StoreUnavailable):
            await opened.transition(settling(record))
        assert await opened.get_challenge(record.challenge_id) == record  # WAL: reads go on
    assert (await opened.get_challenge(record.challenge_id)) == record
    assert isinstance(await opened.transition(settling(record)), TransitionApplied)


async def test_disk_full_rolls_back_and_is_store_unavailable(
    opened: SqliteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``max_page_count`` makes sqlite answer SQLITE_FULL exactly as a full disk does."""
    record = make_record()
    await opened.create_challenge(record)
    pages = await _pragma(opened, "page_count")
    await _pragma(opened, f"max_page_count = {pages}")
    big = make_record(state=State.DELIVERED)
    big_grant = make_grant(big, padding="x" * 200_000)
    with (
        caplog.at_level(logging.ERROR, logger="x402srv.store.sqlite"),
        pytest.raises(StoreUnavailable) as caught,
    ):
        await opened.create_challenge(dataclasses.replace(big, grant=big_grant))
    _assert_hidden(caught.value, opened.path)
    assert "full" in caplog.text
    assert await opened.list_challenges() == [record]


async def test_a_closed_store_is_unavailable(opened: SqliteStore) -> None:
    await opened.close()
    await opened.close()
    with pytest.raises(StoreUnavailable):
        await opened.get_challenge("any")


# ------------------------------------------------------------ several processes


_WORKER = r"""
import asyncio, json, os, sys, time
from pathlib import Path
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.interfaces import TransitionApplied
from x402srv.testing.builders import make_key, make_record
from x402srv.testing.store_contract import settling

path, worker, challenge_id, request_id, lock_file = sys.argv[1:6]
RACERS, ROUNDS = 10, 25

def barrier(phase):
    print("ready", phase, flush=True)
    assert sys.stdin.readline().strip() == "go"

async def main():
    store = SqliteStore(Path(path))
    await store.start()
    record = await store.get_challenge(challenge_id)
    out = {}

    barrier("transition")
    requests = [settling(record, make_key(), attempt_id=f"{worker}-{i}") for i in range(RACERS)]
    results = await asyncio.gather(*(store.transition(r) for r in requests))
    won = [r.record.payment.attempt_id for r in results if isinstance(r, TransitionApplied)]
    out["won"] = won

    barrier("create")
    records = [make_record(request_id=request_id) for _ in range(RACERS)]
    created = await asyncio.gather(*(store.create_challenge(r) for r in records))
    out["created"] = sum(c[1] for c in created)
    out["returned"] = sorted({c[0].challenge_id for c in created})

    barrier("count")
    counts = [store.count_hits({"shared": 1}, window_end=1e10, now=0.0) for _ in range(RACERS)]
    out["totals"] = [totals["shared"] for totals in await asyncio.gather(*counts)]

    barrier("lease")
    fences, overlaps, releases = [], 0, []
    for _ in range(ROUNDS):
        while (lease := await store.acquire_lease("gas", worker, 60, time.time())) is None:
            await asyncio.sleep(0.001)
        try:
            fd = os.open(lock_file, os.O_CREAT | os.O_EXCL)
            os.close(fd)
        except FileExistsError:
            overlaps += 1
        count = int(lease.value or 0)
        await asyncio.sleep(0.0005)
        os.remove(lock_file)
        fences.append(lease.fence)
        releases.append(await store.release_lease(lease, str(count + 1)))
    out.update(fences=fences, overlaps=overlaps, releases=releases)

    await store.close()
    print(json.dumps(out), flush=True)

asyncio.run(main())
"""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


async def _seed(path: Path) -> tuple[str, str]:
    store = SqliteStore(path)
    await store.start()
    record = make_record()
    await store.create_challenge(record)
    await store.close()
    return record.challenge_id, make_record().request_id


async def test_several_processes_on_one_file(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    """4 processes: one settlement winner, one created record, every hit counted once,
    never two lease holders."""
    path = tmp_path / "shared.db"
    challenge_id, request_id = await _seed(path)
    lock_file = tmp_path / "held"
    for n in range(4):
        workers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _WORKER,
                    str(path),
                    f"w{n}",
                    challenge_id,
                    request_id,
                    str(lock_file),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )

    def kill_all() -> None:  # a hung worker must fail the test, not hang it
        for proc in workers:
            proc.kill()

    watchdog = threading.Timer(30, kill_all)
    watchdog.start()
    try:
        for phase in ("transition", "create", "count", "lease"):
            for proc in workers:  # every process is at the barrier ...
                assert proc.stdout is not None
                assert proc.stdout.readline().split() == ["ready", phase]
            for proc in workers:  # ... before any is let go
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
        outputs = []
        for proc in workers:
            assert proc.stdout is not None
            outputs.append(json.loads(proc.stdout.readline()))
            assert proc.wait() == 0
    finally:
        watchdog.cancel()

    won = [attempt for out in outputs for attempt in out["won"]]
    assert len(won) == 1
    store = SqliteStore(path)
    await store.start()
    try:
        record = await store.get_challenge(challenge_id)
        assert record is not None
        assert record.state is State.SETTLING
        assert record.payment is not None
        assert record.payment.attempt_id == won[0]
        assert sum(out["created"] for out in outputs) == 1
        stored = await store.get_by_request_id(request_id)
        assert stored is not None
        assert all(out["returned"] == [stored.challenge_id] for out in outputs)
        totals = sorted(total for out in outputs for total in out["totals"])
        assert totals == list(range(1, 4 * 10 + 1))

        fences = sorted(f for out in outputs for f in out["fences"])
        assert fences == list(range(1, len(fences) + 1)) == list(range(1, 4 * 25 + 1))
        assert sum(out["overlaps"] for out in outputs) == 0
        assert all(all(out["releases"]) for out in outputs)
        last = await store.acquire_lease("gas", "checker", 60, 0)
        assert last is not None
        assert last.value == str(len(fences))  # every holder saw its predecessor's value
    finally:
        await store.close()


# ------------------------------------------------------------------ group commit


def _hold_thread(store: SqliteStore) -> threading.Event:
    """Keep the store's thread busy until the event is set, so inserts queue up."""
    release = threading.Event()
    assert store._executor is not None
    store._executor.submit(release.wait, 10)
    return release


async def _queued(store: SqliteStore, records: list[Any]) -> list[Any]:
    """Create ``records`` concurrently while the thread is held: they form one batch."""
    release = _hold_thread(store)
    tasks = [asyncio.create_task(store.create_challenge(r)) for r in records]
    await asyncio.sleep(0.05)
    release.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_inserts_commit_together_and_each_keeps_its_answer(
    opened: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches: list[int] = []
    real = sqlite_ops.create_challenges

    def spy(conn: sqlite3.Connection, inserts: Any) -> Any:
        batches.append(len(inserts))
        return real(conn, inserts)

    monkeypatch.setattr(sqlite_ops, "create_challenges", spy)
    existing = make_record()
    await opened.create_challenge(existing)
    first, plain = make_record(), make_record()
    same_request = make_record(request_id=first.request_id)
    taken_id = make_record(challenge_id=existing.challenge_id)
    old_request = make_record(request_id=existing.request_id)
    results = await _queued(opened, [first, same_request, taken_id, plain, old_request])
    assert batches == [1, 5]
    assert results[0] == (first, True)
    assert results[1] == (first, False)  # the requestId an earlier insert of the batch took
    assert isinstance(results[2], ValueError)
    assert results[3] == (plain, True)
    assert results[4] == (existing, False)
    assert await opened.get_by_request_id(first.request_id) == first
    assert await opened.get_challenge(plain.challenge_id) == plain
    assert await opened.get_challenge(existing.challenge_id) == existing


async def test_the_usual_batch_is_one_statement(opened: SqliteStore) -> None:
    records = [make_record() for _ in range(40)]
    results = await _queued(opened, records)
    assert results == [(r, True) for r in records]
    assert await opened.list_challenges(limit=100) == sorted(
        records, key=lambda r: (r.updated_at, r.challenge_id)
    )


async def test_a_cancelled_caller_keeps_its_insert(opened: SqliteStore) -> None:
    record = make_record()
    release = _hold_thread(opened)
    task = asyncio.create_task(opened.create_challenge(record))
    await asyncio.sleep(0.02)
    task.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await opened.get_challenge(record.challenge_id) == record  # queued behind it


async def test_a_batch_that_cannot_be_written_fails_every_insert(opened: SqliteStore) -> None:
    with locked(opened.path):
        records = [make_record() for _ in range(3)]
        results = await _queued(opened, records)
    assert all(isinstance(r, StoreUnavailable) for r in results)
    for error in results:
        _assert_hidden(error, opened.path)
    assert await opened.list_challenges() == []


async def test_a_thread_of_its_own_checkpoints_the_wal(opened: SqliteStore) -> None:
    """The store's commits never checkpoint (below the safety net); its thread does."""
    assert await _pragma(opened, "wal_autocheckpoint") == SAFETY_NET_PAGES
    thread = opened._checkpointer._thread
    assert thread is not None
    assert thread.is_alive()
    before = opened.path.stat().st_size
    await asyncio.gather(*(opened.create_challenge(make_record()) for _ in range(300)))
    deadline = asyncio.get_running_loop().time() + 5
    while opened.path.stat().st_size == before:  # the pages reached the database file
        assert asyncio.get_running_loop().time() < deadline, "no checkpoint ran"
        await asyncio.sleep(INTERVAL_SECONDS)
    await opened.close()
    assert not thread.is_alive()


def test_a_quiet_store_is_checkpointed_about_once_a_second(tmp_path: Path) -> None:
    """Each copy-back makes the next write restart the WAL with an fsync: only when it pays."""
    checkpointer = Checkpointer(tmp_path / "x.db")
    start = checkpointer._last
    assert not checkpointer.due(start + 60)  # nothing ran: nothing to copy
    checkpointer.ran()
    assert not checkpointer.due(start + IDLE_SECONDS / 2)  # one write: wait a while
    assert checkpointer.due(start + IDLE_SECONDS)
    checkpointer.ran(MIN_OPERATIONS)
    assert checkpointer.due(start)  # a busy store: every interval


async def test_the_checkpoint_thread_starts_the_wal_over_itself(opened: SqliteStore) -> None:
    """The header's fsync of a restarted WAL is the thread's, not the next reservation's."""
    opened._checkpointer.stop()  # this test's connection plays the thread
    await asyncio.gather(*(opened.create_challenge(make_record()) for _ in range(50)))
    conn = sqlite3.connect(opened.path, timeout=0, isolation_level=None)
    try:
        checkpoint(conn)
        # Everything copied and the WAL started over by the thread's own empty write:
        # what is left to copy is that one write's page.
        assert conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone() == (0, 1, 1)
    finally:
        conn.close()
    assert await _pragma(opened, "user_version") == sqlite_schema.SCHEMA_VERSION
    record = make_record()
    assert await opened.create_challenge(record) == (record, True)


async def test_the_checkpoint_threads_own_write_never_holds_the_lock_between_two_statements(
    opened: SqliteStore,
) -> None:
    """The loop's credit steps never find the lock held by a thread waiting for the GIL.

    The thread needs the GIL between two statements, and a busy event loop lets
    it go only every switch interval (5 ms). Its write used to be a transaction
    of three statements: it held the write lock through those waits, and about
    one reservation or settlement in ten of the stream bench found the lock
    taken and queued for the store's thread. Here the thread stops before each
    of its statements (sqlite's trace callback, which needs the GIL too) and
    another connection tries the lock without waiting: it must get it each time.
    """
    opened._checkpointer.stop()  # this test's connection plays the thread
    await asyncio.gather(*(opened.create_challenge(make_record()) for _ in range(20)))
    conn = sqlite3.connect(opened.path, timeout=0, isolation_level=None)
    probe = sqlite3.connect(opened.path, timeout=0, isolation_level=None)
    statements: list[str] = []
    held: list[str] = []  # the statements before which the lock was taken

    def before(statement: str) -> None:
        statements.append(statement)
        try:
            probe.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:  # (sqlite would swallow it: kept instead)
            held.append(statement)
        else:
            probe.execute("ROLLBACK")

    try:
        conn.set_trace_callback(before)
        checkpoint(conn)
        conn.set_trace_callback(None)
        assert len(statements) >= 3  # the checkpoint, and the write's own
        assert held == []
        # ... and it did write: the WAL started over with that write's page.
        assert conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone() == (0, 1, 1)
    finally:
        conn.close()
        probe.close()


async def test_a_credit_step_runs_on_the_loop(opened: SqliteStore) -> None:
    """No hop to the store's thread (held here) for a reservation when nothing else writes."""
    await opened.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    release = _hold_thread(opened)
    try:
        spent = await asyncio.wait_for(
            opened.spend("g", 3, now=BASE_TIME, keep_until=BASE_TIME + 60), 5
        )
    finally:
        release.set()
    assert spent.balance == 7
    account = await opened.get_credits("g")  # committed, on the same file
    assert account is not None and account.balance == 7


@pytest.fixture
async def patient(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """A store whose thread waits the default 5 s for another writer's lock."""
    store = SqliteStore(tmp_path / "patient.db")
    await store.start()
    yield store
    await store.close()


async def test_a_step_never_overtakes_the_queued_ones(patient: SqliteStore) -> None:
    """Once one step waits in the queue, the next ones queue behind it, in call order."""
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    with locked(patient.path):
        first = asyncio.create_task(patient.spend("g", 6, now=BASE_TIME, keep_until=BASE_TIME + 60))
        await asyncio.sleep(0.01)  # (queued: the lock is held)
        second = asyncio.create_task(
            patient.spend("g", 6, now=BASE_TIME, keep_until=BASE_TIME + 60)
        )
        await asyncio.sleep(0.02)
        assert not first.done() and not second.done()
    assert (await first).outcome is SpendOutcome.SPENT
    assert (await second).outcome is SpendOutcome.NO_CREDITS  # (4 left: the first went first)


async def test_a_step_queues_while_another_writer_holds_the_lock(patient: SqliteStore) -> None:
    """The loop never waits for the lock: the step queues, and the thread waits for it."""
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    with locked(patient.path):
        task = asyncio.create_task(patient.spend("g", 4, now=BASE_TIME, keep_until=BASE_TIME + 60))
        await asyncio.sleep(0.02)
        assert not task.done()
    assert (await task).balance == 6


async def test_a_step_that_finds_the_lock_held_for_a_moment_runs_on_the_loop_once_it_is_free(
    patient: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker's step holds the lock for as long as ours: no hand-off to the thread.

    Queued at the first refusal, one worker of two sent about one step in eight
    to its thread, where each waited for the GIL with the lock held.
    """
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    drains: list[None] = []
    drain = patient._drain_steps

    def counted() -> None:
        drains.append(None)
        drain()

    monkeypatch.setattr(patient, "_drain_steps", counted)
    writer = sqlite3.connect(patient.path, isolation_level=None, timeout=0.1)
    try:
        writer.execute("BEGIN IMMEDIATE")  # (another worker, in the middle of its step)
        task = asyncio.create_task(patient.spend("g", 4, now=BASE_TIME, keep_until=BASE_TIME + 60))
        await asyncio.sleep(0)  # its first try: the lock is held
        assert not task.done()
        writer.execute("COMMIT")
    finally:
        writer.close()
    assert (await task).balance == 6
    assert drains == []


async def test_a_refund_whose_caller_leaves_while_the_lock_is_held_is_made_all_the_same(
    patient: SqliteStore,
) -> None:
    """Cancelled while it waits to try again, a refund is queued for the thread, not dropped."""
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    with locked(patient.path):
        task = asyncio.create_task(patient.refund("g", 5, now=BASE_TIME))
        await asyncio.sleep(0)  # its first try: the lock is held; it waits to try again
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    deadline = asyncio.get_running_loop().time() + 5
    while (account := await patient.get_credits("g")) is not None and account.balance != 15:
        assert asyncio.get_running_loop().time() < deadline, account
        await asyncio.sleep(0.01)


async def test_a_refund_whose_caller_leaves_as_the_store_closes_is_made_before_the_file_closes(
    patient: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled in a pause while the store closes, a refund still reaches the store's thread.

    A close takes the store's executor away at once, but its thread runs what
    was queued before the file closes: a refund not cancelled meanwhile is
    made there. One whose caller left in that moment was dropped, with nothing
    in the log: the buyer's credits never came back.
    """
    monkeypatch.setattr(sqlite_store, "INLINE_PAUSES", (30.0,))  # (still pausing when cancelled)
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    with locked(patient.path):
        task = asyncio.create_task(patient.refund("g", 5, now=BASE_TIME))
        await asyncio.sleep(0)  # its first try: the lock is held; it waits to try again
        closing = asyncio.create_task(patient.close())
        await asyncio.sleep(0)
        assert patient._executor is None  # the close has begun
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await closing
    reopened = SqliteStore(patient.path)
    await reopened.start()
    try:
        account = await reopened.get_credits("g")
    finally:
        await reopened.close()
    assert account is not None and account.balance == 15


async def test_a_refund_whose_caller_leaves_after_the_store_closed_is_logged_as_not_made(
    patient: SqliteStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody waits for its outcome any more: a refund that cannot be made is an error logged."""
    monkeypatch.setattr(sqlite_store, "INLINE_PAUSES", (30.0,))
    await patient.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
    with locked(patient.path):
        task = asyncio.create_task(patient.refund("g", 5, now=BASE_TIME))
        await asyncio.sleep(0)  # its first try: the lock is held; it waits to try again
    await patient.close()
    with caplog.at_level(logging.ERROR, logger="x402srv.store.sqlite"):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(20):  # (the failure comes back through the loop)
            await asyncio.sleep(0)
    assert any("refund whose caller left" in r.getMessage() for r in caplog.records)


async def test_a_store_that_fsyncs_every_commit_runs_no_step_on_the_loop(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "full.db", SqliteOptions(synchronous="FULL"))
    await store.start()
    try:
        assert store._inline is None
        await store.credit("g", 10, key="g", now=BASE_TIME, keep_until=BASE_TIME + 60)
        assert (await store.spend("g", 4, now=BASE_TIME, keep_until=BASE_TIME + 60)).balance == 6
    finally:
        await store.close()


def _v3_row(record: ChallengeRecord) -> tuple[str, str, str, float, str]:
    """A challenge row as versions 1 to 4 wrote it (no payer column)."""
    return (
        record.challenge_id,
        record.request_id,
        record.state.value,
        record.updated_at,
        encode_record(record),
    )


async def test_a_version_4_file_files_its_records_under_their_payers(tmp_path: Path) -> None:
    """The previous release's records gain a payer column from their JSON, and counts a table."""
    path = tmp_path / "v4.db"
    key = make_key(payer="0x" + "Cd" * 20)
    pending = make_record(at=BASE_TIME)
    settling_record = make_record(at=BASE_TIME + 1, state=State.SETTLING, payment=make_payment(key))
    delivered = make_record(at=BASE_TIME + 2, state=State.DELIVERED, payer="0x" + "Ef" * 20)
    raw = sqlite3.connect(path, isolation_level=None)
    for statement in (
        *sqlite_schema._SCHEMA_V1,
        *sqlite_schema._SCHEMA_V2,
        *sqlite_schema._SCHEMA_V3,
        *sqlite_schema._SCHEMA_V4,
    ):
        raw.execute(statement)
    for record in (pending, settling_record, delivered):
        raw.execute("INSERT INTO challenges VALUES (?, ?, ?, ?, ?)", _v3_row(record))
    raw.execute("PRAGMA user_version = 4")
    raw.close()

    store = SqliteStore(path)
    await store.start()
    try:
        assert await store.find_challenges(payer=key.payer) == [settling_record]
        assert await store.find_challenges(payer="0x" + "ef" * 20) == [delivered]
        assert await store.find_challenges() == [delivered, settling_record, pending]
        await store.add_counts({(3600, "n"): 2}, forget_before=0)
        assert await store.read_counts(start=0, end=7200) == {(3600, "n"): 2}
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema.SCHEMA_VERSION
        schema = dict(check.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
        assert "(payer, updated_at, challenge_id)" in schema["challenges_by_payer"]
        assert "WITHOUT ROWID" in schema["counts"]
    finally:
        check.close()


async def test_a_version_6_file_moves_its_used_calls_out_of_the_accounts(
    tmp_path: Path,
) -> None:
    """Used calls kept in an account's JSON become rows, newest first as before."""
    path = tmp_path / "v6.db"
    calls = tuple(UsedCall(BASE_TIME + n, f"/r{n}", 10, n) for n in range(3))
    account = CreditAccount(
        "grant-1", 70, 100, 30, 0, 3, 0, 0, BASE_TIME + 3600, used_calls=calls[::-1]
    )
    raw = sqlite3.connect(path, isolation_level=None)
    for _, statements in sqlite_schema._MIGRATIONS[:6]:
        for statement in statements:
            raw.execute(statement)
    raw.execute(
        "INSERT INTO credits VALUES (?, ?, ?)",
        ("grant-1", account.keep_until, encode_account(account, entries=False)),
    )
    raw.execute("PRAGMA user_version = 6")
    raw.close()

    store = SqliteStore(path)
    await store.start()
    try:
        moved = await store.get_credits("grant-1")
        assert moved is not None
        assert moved.used_calls == calls[::-1]  # newest first
        assert moved.balance == 70
        newest = UsedCall(BASE_TIME + 9, "/r9", 10, 1)
        assert await store.settle("grant-1", 9, now=BASE_TIME + 9, call=newest) == 79
        after = await store.get_credits("grant-1")
        assert after is not None
        assert after.used_calls == (newest, *calls[::-1])
    finally:
        await store.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == sqlite_schema.SCHEMA_VERSION
        (text,) = check.execute("SELECT account FROM credits").fetchone()
        assert "used_calls" not in json.loads(text)  # the account row stays small
        assert check.execute("SELECT count(*) FROM used_calls").fetchone()[0] == 4
    finally:
        check.close()


async def test_used_calls_of_grants_taking_turns_are_all_trimmed(opened: SqliteStore) -> None:
    """A settle trims now and then (``TRIM_USED_CALLS_EVERY``), yet no grant's rows pile up.

    Two grants settling in turn see every other ``seq``: a trim on every Nth ``seq``
    would have left one of them growing for good.
    """
    settles = 1200
    for grant in ("a", "b"):
        await opened.credit(
            grant, 10 * settles, key=grant, now=BASE_TIME, keep_until=BASE_TIME + 60
        )
    for n in range(settles):
        for grant in ("a", "b"):
            call = UsedCall(BASE_TIME + n / 1000, f"/r{n}", 10, 1)
            await opened.settle(grant, 0, now=BASE_TIME + n / 1000, call=call)
    for grant in ("a", "b"):
        account = await opened.get_credits(grant)
        assert account is not None
        assert len(account.used_calls) == USED_CALLS
        assert account.used_calls[0].route == f"/r{settles - 1}"  # newest first
    rows = await opened._run(
        "count",
        lambda conn: dict(
            conn.execute("SELECT grant_id, count(*) FROM used_calls GROUP BY grant_id")
        ),
    )
    # Untrimmed: 1200 each. Past USED_CALLS + 30 * TRIM_USED_CALLS_EVERY with a chance
    # of (15/16)**480 (about 4e-14) per grant.
    assert set(rows) == {"a", "b"}
    assert all(count <= USED_CALLS + 30 * TRIM_USED_CALLS_EVERY for count in rows.values())


async def test_find_reads_one_index_range_per_state(opened: SqliteStore) -> None:
    """A page of the console never sorts the table: each statement walks an index backwards."""
    conn = sqlite3.connect(opened.path)
    try:
        for states, payer, before in (
            (None, None, None),
            ("DELIVERED", None, (BASE_TIME, "x")),
            (None, "0xab", None),
        ):
            sql = sqlite_reports._find_statement(
                states is not None, 1 if payer else 0, before is not None
            )
            params: list[object] = [p for p in (states, payer) if p is not None]
            if before is not None:
                params += list(before)
            plan = " ".join(
                row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", [*params, 10])
            )
            assert "USE TEMP B-TREE" not in plan, plan
            assert "SCAN challenges USING" in plan or "SEARCH challenges USING" in plan, plan
    finally:
        conn.close()
