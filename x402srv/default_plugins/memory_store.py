"""Built-in plugin: the ``memory`` store, for tests and single-process trials.

Everything lives in dicts of this process, so records vanish on restart and
each worker process would see its own copy: the factory refuses
``server.workers > 1`` rather than let two workers sell the same payment twice.

Every operation runs under one ``asyncio.Lock`` and never awaits inside it, so
each is atomic with respect to every other, which is the guarantee the sqlite
and Redis stores give across processes. Credit accounts are immutable
``CreditAccount`` values decided by ``credit_rules``, replaced whole.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.config.fields import PluginOptions
from x402srv.default_plugins.memory_refunds import MemoryRefunds
from x402srv.errors import ConfigError
from x402srv.hookspecs import Register, hookimpl
from x402srv.interfaces import (
    CreditAccount,
    Credited,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    Lease,
    PaymentClaimed,
    RateWindow,
    Spend,
    Store,
    TransitionApplied,
    TransitionRequest,
    UsedCall,
)
from x402srv.interfaces import TransitionResult as Result
from x402srv.refunds.records import RefundRecord
from x402srv.server.plugin_context import PluginContext
from x402srv.stores.credit_rules import apply_credit, apply_refund, apply_settle, apply_spend, live
from x402srv.stores.dump_rules import sort_items
from x402srv.stores.rules import (
    check_state,
    claim_conflict,
    claim_keys,
    decode_record,
    decode_task,
    encode_record,
    encode_task,
    key_to_release,
    payer_of,
    tx_claim_key,
)

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Row:
    """A stored record: its JSON plus the fields lookups and listing need."""

    request_id: str
    state: State
    updated_at: float
    payer: str | None
    json: str


@dataclass(slots=True)
class _Task:
    json: str
    version: int
    prune_after: float | None


@dataclass(slots=True)
class _Counter:
    window_end: float
    hits: int


@dataclass(slots=True)
class _LeaseRow:
    holder: str
    fence: int
    expires_at: float
    released: bool
    value: str | None


class MemoryStore(MemoryRefunds):
    """Challenge records, claims and leases in this process's memory."""

    name = "memory"

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._rows: dict[str, _Row] = {}
        self._by_request: dict[str, str] = {}
        self._payments: dict[str, str] = {}
        self._txs: dict[str, str] = {}
        self._leases: dict[str, _LeaseRow] = {}
        self._tasks: dict[str, _Task] = {}
        self._counters: dict[str, _Counter] = {}
        # (window_end, key) of every counter, oldest first: what to forget next.
        self._counter_ends: list[tuple[float, str]] = []
        self._counts: dict[int, dict[str, int]] = {}  # bucket -> name -> count

        self._accounts: dict[str, CreditAccount] = {}
        # (keep_until, grant_id) of every account as created or extended: what to forget next.
        self._account_ends: list[tuple[float, str]] = []
        self._refunds: dict[str, RefundRecord] = {}

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Records stay until the object is dropped, so a reopened store still has them."""

    async def ping(self) -> None:
        """Always reachable."""

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        async with self._lock:
            existing = self._by_request.get(record.request_id)
            if existing is not None:
                return decode_record(self._rows[existing].json), False
            if record.challenge_id in self._rows:
                raise ValueError(f"challenge_id {record.challenge_id} already exists")
            key = str(claim_payment) if claim_payment is not None else None
            owner = self._payments.get(key) if key is not None else None
            if owner is not None and owner != record.challenge_id:
                return PaymentClaimed(owner)
            self._put(record)
            if key is not None:
                self._payments[key] = record.challenge_id
            return record, True

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        async with self._lock:
            return self._get(challenge_id)

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        async with self._lock:
            challenge_id = self._by_request.get(request_id)
            return self._get(challenge_id) if challenge_id is not None else None

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        async with self._lock:
            owner = self._payments.get(str(key))
            return self._get(owner) if owner is not None else None

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        async with self._lock:
            owner = self._txs.get(tx_claim_key(tx_hash))
            return self._get(owner) if owner is not None else None

    async def transition(self, request: TransitionRequest) -> Result:
        async with self._lock:
            record = self._get(request.challenge_id)
            mismatch = check_state(record, request)
            if mismatch is not None:
                return mismatch
            assert record is not None  # check_state answers for a missing record
            key, tx = claim_keys(request)
            conflict = claim_conflict(
                record.challenge_id,
                self._payments.get(key) if key is not None else None,
                self._txs.get(tx) if tx is not None else None,
            )
            if conflict is not None:
                return conflict
            updated = record.apply(request.changes, request.to, request.at, request.reason)
            self._put(updated)
            released = key_to_release(record, request)
            if released is not None and self._payments.get(released) == record.challenge_id:
                del self._payments[released]
            if key is not None:
                self._payments[key] = record.challenge_id
            if tx is not None:
                self._txs[tx] = record.challenge_id
            return TransitionApplied(updated)

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        # Python orders str by code point, which is the UTF-8 byte order the
        # durable stores sort ids in.
        async with self._lock:
            wanted = None if states is None else set(states)
            rows = [
                ((row.updated_at, challenge_id), row)
                for challenge_id, row in self._rows.items()
                if (wanted is None or row.state in wanted)
                and (updated_before is None or row.updated_at < updated_before)
                and (after is None or (row.updated_at, challenge_id) > after)
            ]
            rows.sort(key=lambda item: item[0])
            return [decode_record(row.json) for _, row in rows[: max(limit, 0)]]

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        async with self._lock:
            wanted = set(states)
            doomed = sorted(
                (row.updated_at, challenge_id)
                for challenge_id, row in self._rows.items()
                if row.state in wanted and row.updated_at < updated_before
            )[: max(limit, 0)]
            gone = {challenge_id for _, challenge_id in doomed}
            for challenge_id in gone:
                row = self._rows.pop(challenge_id)
                del self._by_request[row.request_id]
            # Claims point at challenges, not the other way round: one pass over each map.
            for claims in (self._payments, self._txs):
                for key in [k for k, owner in claims.items() if owner in gone]:
                    del claims[key]
            return len(gone)

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        text = encode_task(document)  # outside the lock: a bad document changes nothing
        async with self._lock:
            current = self._tasks.get(task_id)
            stored_version = current.version if current is not None else None
            if stored_version != expect_version:
                return None
            version = 1 if stored_version is None else stored_version + 1
            self._tasks[task_id] = _Task(text, version, prune_after)
            return version

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        async with self._lock:
            current = self._tasks.get(task_id)
        if current is None:
            return None
        return decode_task(current.json), current.version

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        async with self._lock:
            due = heapq.nsmallest(
                max(limit, 0),
                (
                    (after, task_id)
                    for task_id, task in self._tasks.items()
                    if (after := task.prune_after) is not None and after < before
                ),
            )
            for _, task_id in due:
                del self._tasks[task_id]
            return len(due)

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        if not hits:
            return {}
        async with self._lock:
            self._forget_counters(now)
            totals: dict[str, int] = {}
            for key, delta in hits.items():
                counter = self._counters.get(key)
                if counter is None:
                    counter = self._counters[key] = _Counter(window_end, 0)
                    heapq.heappush(self._counter_ends, (window_end, key))
                elif counter.window_end != window_end:
                    counter.window_end = window_end
                    heapq.heappush(self._counter_ends, (window_end, key))
                counter.hits += delta
                totals[key] = counter.hits
            return totals

    def _forget_counters(self, now: float) -> None:
        """Drop every counter whose window ended before ``now``, so memory stays bounded.

        A heap entry whose counter has since moved to another window is stale
        and only dropped; the counter's own entry comes later.
        """
        ends = self._counter_ends
        while ends and ends[0][0] < now:
            end, key = heapq.heappop(ends)
            counter = self._counters.get(key)
            if counter is not None and counter.window_end == end:
                del self._counters[key]

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        async with self._lock:
            self._forget_accounts(now)
            current = live(self._accounts.get(grant_id), now)
            before = current is not None and any(e.key == key for e in current.entries)
            updated, answer = apply_credit(
                current,
                grant_id,
                amount,
                key=key,
                now=now,
                keep_until=keep_until,
                credited_before=before,
            )
            if updated is not None:
                self._put_account(updated)
            return answer

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
        async with self._lock:
            updated, answer = apply_spend(
                self._accounts.get(grant_id),
                grant_id,
                cost,
                now=now,
                keep_until=keep_until,
                rate=rate,
                credits=credits,
            )
            if updated is not None:
                self._put_account(updated)
            return answer

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        async with self._lock:
            updated, balance = apply_refund(self._accounts.get(grant_id), amount, now=now)
            if updated is not None:
                self._put_account(updated)
            return balance

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        async with self._lock:
            updated, balance = apply_settle(self._accounts.get(grant_id), release, call, now=now)
            if updated is not None:
                self._put_account(updated)
            return balance

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        async with self._lock:
            return self._accounts.get(grant_id)

    def _put_account(self, account: CreditAccount) -> None:
        previous = self._accounts.get(account.grant_id)
        if previous is None or previous.keep_until != account.keep_until:
            heapq.heappush(self._account_ends, (account.keep_until, account.grant_id))
        self._accounts[account.grant_id] = account

    def _forget_accounts(self, now: float) -> None:
        """Drop accounts past ``keep_until``; called on each credit, so memory stays bounded."""
        ends = self._account_ends
        while ends and ends[0][0] < now:
            end, grant_id = heapq.heappop(ends)
            account = self._accounts.get(grant_id)
            if account is not None and account.keep_until == end:
                del self._accounts[grant_id]

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        async with self._lock:
            row = self._leases.get(name)
            if row is not None and not row.released and row.expires_at > now:
                return None
            fence = row.fence + 1 if row is not None else 1
            value = row.value if row is not None else None
            self._leases[name] = _LeaseRow(holder, fence, now + ttl, False, value)
            return Lease(name, holder, fence, now + ttl, value)

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        async with self._lock:
            row = self._leases.get(lease.name)
            if row is None or row.fence != lease.fence or row.holder != lease.holder:
                return False
            row.released = True
            if value is not None:
                row.value = value
            return True

    async def held_lease(self, name: str, now: float) -> Lease | None:
        async with self._lock:
            row = self._leases.get(name)
            if row is None or row.released or row.expires_at <= now:
                return None
            return Lease(name, row.holder, row.fence, row.expires_at, row.value)

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        async with self._lock:
            row = self._leases.get(held.name)
            if row is None or row.released or (row.holder, row.fence) != (held.holder, held.fence):
                return None
            fence = row.fence + 1
            self._leases[held.name] = _LeaseRow(holder, fence, now + ttl, False, row.value)
            return Lease(held.name, holder, fence, now + ttl, row.value)

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        async with self._lock:
            wanted = None if states is None else set(states)
            owner = payer.lower() if payer is not None else None
            rows = [
                ((row.updated_at, challenge_id), row)
                for challenge_id, row in self._rows.items()
                if (wanted is None or row.state in wanted)
                and (owner is None or row.payer == owner)
                and (before is None or (row.updated_at, challenge_id) < before)
            ]
            newest = heapq.nlargest(max(limit, 0), rows, key=lambda item: item[0])
            return [decode_record(row.json) for _, row in newest]

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        async with self._lock:
            for bucket in [b for b in self._counts if b < forget_before]:
                del self._counts[bucket]
            for (bucket, name), delta in counts.items():
                names = self._counts.setdefault(int(bucket), {})
                names[name] = names.get(name, 0) + int(delta)

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        async with self._lock:
            return {
                (bucket, name): count
                for bucket, names in self._counts.items()
                if start <= bucket < end
                for name, count in names.items()
            }

    async def export_items(self) -> AsyncIterator[ExportItem]:
        """A snapshot taken under the lock, handed out after it."""
        async with self._lock:
            owned: dict[str, tuple[list[str], list[str]]] = {}
            for claims, side in ((self._payments, 0), (self._txs, 1)):
                for key, owner in claims.items():
                    owned.setdefault(owner, ([], []))[side].append(key)
            items: list[ExportItem] = []
            for challenge_id, row in sorted(self._rows.items()):
                payments, txs = owned.get(challenge_id, ([], []))
                record = decode_record(row.json)
                items.append(ExportedChallenge(record, tuple(sorted(payments)), tuple(sorted(txs))))
            for task_id, task in sorted(self._tasks.items()):
                document = decode_task(task.json)
                items.append(ExportedTask(task_id, document, task.version, task.prune_after))
            items += [self._accounts[grant_id] for grant_id in sorted(self._accounts)]
            for name, lease in sorted(self._leases.items()):
                items.append(ExportedLease(name, lease.fence, lease.value))
        for item in items:
            yield item

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        batch = sort_items(items)
        tasks = {task.task_id: encode_task(task.document) for task in batch.tasks}
        async with self._lock:
            for item in batch.challenges:
                record = item.record
                taken = (
                    record.challenge_id in self._rows
                    or record.request_id in self._by_request
                    or any(key in self._payments for key in item.payment_claims)
                    or any(tx in self._txs for tx in item.tx_claims)
                )
                if taken:
                    raise ValueError(f"challenge {record.challenge_id} (or a claim) exists")
            for task_id in tasks:
                if task_id in self._tasks:
                    raise ValueError(f"task {task_id} exists")
            for account in batch.accounts:
                if live(self._accounts.get(account.grant_id), now) is not None:
                    raise ValueError(f"the credit account of {account.grant_id} exists")
            for item in batch.challenges:
                self._put(item.record)
                for key in item.payment_claims:
                    self._payments[key] = item.record.challenge_id
                for tx in item.tx_claims:
                    self._txs[tx] = item.record.challenge_id
            for task in batch.tasks:
                self._tasks[task.task_id] = _Task(
                    tasks[task.task_id], task.version, task.prune_after
                )
            for account in batch.live_accounts(now):
                self._put_account(account)
            for lease in batch.leases:
                row = self._leases.get(lease.name)
                if row is None:
                    self._leases[lease.name] = _LeaseRow("", lease.fence, 0.0, True, lease.value)
                else:
                    row.fence = max(row.fence, lease.fence)

    def _get(self, challenge_id: str) -> ChallengeRecord | None:
        row = self._rows.get(challenge_id)
        return decode_record(row.json) if row is not None else None

    def _put(self, record: ChallengeRecord) -> None:
        self._rows[record.challenge_id] = _Row(
            record.request_id,
            record.state,
            record.updated_at,
            payer_of(record),
            encode_record(record),
        )
        self._by_request[record.request_id] = record.challenge_id


class MemoryOptions(PluginOptions):
    """``[store.memory]`` takes no options; the table exists only to reject typos."""


def build_memory_store(ctx: PluginContext) -> MemoryStore:
    """Refuse several workers: each would hold its own records and claims."""
    ctx.parse_options(MemoryOptions)
    workers = ctx.config.server.workers
    if workers > 1:
        raise ConfigError(
            f"the memory store lives inside one process, but server.workers = {workers}; "
            'use backend = "sqlite" (or a shared store such as redis) with several workers',
            path="store.backend",
        )
    return MemoryStore()


@hookimpl
def register_stores(register: Register[Store]) -> None:
    register("memory", build_memory_store)
