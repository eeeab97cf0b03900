"""The ``redis`` store: challenge records, claims, leases and tasks shared by instances.

Several x402srv instances (each with several workers) behind a load balancer
share one Redis. Every multi-key change is one Lua script (``scripts``), so
what the sqlite store guarantees across the processes of one host holds across
hosts: one settlement per challenge, one challenge per payment and per txHash,
one holder per lease (taken over from a dead holder only by ``TAKE_OVER_LEASE``,
a compare-and-set on holder and fence). The key layout is in ``keys``.

Transitions are optimistic: read the record, decide with the same
store rules (``x402srv.plugin``) the built-in stores use, compute the new record with
``ChallengeRecord.apply``, and let the script write it only if the record's
write counter did not move meanwhile; if it did, read again. Records stay the
exact JSON ``encode_record`` makes, never re-encoded by Lua.

Every Redis or socket error becomes ``StoreUnavailable`` (503 with
Retry-After) at this boundary; see ``connection``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

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
    nameable,
    payer_of,
    state_values,
    tx_claim_key,
)

from . import credit_scripts, durability, refund_scripts, scripts
from .connection import (
    RETRY_AFTER,
    UNAVAILABLE,
    client_for,
    converted,
    describe,
    display_url,
    is_auth_failure,
    unavailable,
)
from .credits import CreditMethods
from .dump import DumpMethods
from .keys import KeySpace
from .options import RedisOptions
from .refunds import RefundMethods
from .replicas import run_waited, writes

__all__ = ["RedisStore"]

log = logging.getLogger("x402srv_redis")

#: Creates sent in one ``CREATE`` call at most (the script runs them all without
#: interleaving other commands: a few milliseconds at most, then the next call).
MAX_BATCH = 128

Created = tuple[ChallengeRecord, bool] | PaymentClaimed

#: Rounds of read-decide-write one transition may lose to concurrent writers of
#: the same record before giving up; each lost round means another write won.
MAX_ROUNDS = 64
#: Old count buckets deleted per ``add_counts`` call at most.
SWEEP_BUCKETS = 8


class RedisStore(CreditMethods, DumpMethods, RefundMethods):
    """A ``Store`` on one Redis primary, reached at one URL (a ``CreditStore`` too: ``credits``)."""

    name = "redis"

    def __init__(self, url: Secret, options: RedisOptions | None = None) -> None:
        self.url = url
        self.options = options or RedisOptions()
        self.keys = KeySpace(self.options.key_prefix)
        self._client: Redis | None = None
        self._sentinels: list[Redis] = []
        self._scripts: dict[str, AsyncScript] = {}
        self._waited: set[str] = set()  # scripts that write: WAIT behind them (replicas)
        self._creates: Coalescer[_Create, Created] = Coalescer(
            self._create_batch, max_batch=MAX_BATCH
        )

    def __repr__(self) -> str:
        return f"RedisStore({display_url(self.url)}, prefix={self.keys.prefix!r})"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Build the pool, say hello and read the server's persistence settings.

        Wrong credentials stop the start (the seller must fix the config), and
        so does persistence that can lose acknowledged writes when
        ``require_durable`` is set; otherwise that is a warning (``durability``).
        A server that is down only warns: requests answer 503 until it is back.
        """
        if self._client is not None:
            return
        client, self._sentinels = client_for(self.url, self.options)
        self._scripts = {
            name: client.register_script(getattr(module, name))
            for module in (scripts, credit_scripts, refund_scripts)
            for name in module.__all__
        }
        if self.options.wait_replicas:
            self._waited = {name for name, script in self._scripts.items() if writes(script)}
        self._client = client
        where = display_url(self.url)
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            if is_auth_failure(exc):
                await self.close()
                raise ConfigError(
                    "Redis refused the credentials of this URL (value not shown)",
                    path="store.url",
                ) from None
            log.warning(
                "redis store %s unreachable at start (%s); requests answer 503 until it is back",
                where,
                describe(exc),
            )
            if not self.options.require_durable:
                return
        try:
            await durability.check(client, where, require_durable=self.options.require_durable)
        except ConfigError:
            await self.close()
            raise

    async def close(self) -> None:
        await self._creates.drained()  # creates already queued still get their answer
        client, self._client = self._client, None
        sentinels, self._sentinels = self._sentinels, []
        for each in ([client] if client is not None else []) + sentinels:
            try:
                await each.aclose()
            except (RedisError, OSError) as exc:
                log.warning("redis store: close failed (%s)", describe(exc))

    async def ping(self) -> None:
        await self._call("ping", self._redis().ping())

    # ------------------------------------------------------------ challenges

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        """Unpaid creates go out coalesced (``batch``); one with a payment goes at once.

        A paying buyer's create never queues behind a burst of unpaid ones: it
        is a call of its own, on another pooled connection, running the same
        script.
        """
        if not (nameable(record.challenge_id) and nameable(record.request_id)):
            raise ValueError("a challenge_id or request_id Redis cannot hold")
        create = _Create(record, encode_record(record), str(claim_payment or ""))
        if claim_payment is None:
            return await self._creates.submit(create)
        outcome = (await self._create_batch([create]))[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _create_batch(self, batch: list[_Create]) -> list[Created | Exception]:
        """One ``CREATE`` call for ``batch``: an outcome (or the error) per create, in order."""
        args: list[Any] = [self.keys.prefix, self.options.record_ttl_seconds]
        for create in batch:
            record = create.record
            args += [
                record.challenge_id,
                record.request_id,
                create.json,
                record.state.value,
                repr(record.updated_at),
                create.claim,
                payer_of(record) or "",
            ]
        try:
            replies = await self._script("CREATE", keys=[], args=args)
        except StoreUnavailable:
            # Each caller gets an error of its own (one object raised in many
            # tasks would collect all their tracebacks).
            return [unavailable() for _ in batch]
        return [_created(create, reply) for create, reply in zip(batch, replies, strict=True)]

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        if not nameable(challenge_id):
            return None
        text = await self._call(
            "get_challenge", self._redis().hget(self.keys.challenge(challenge_id), "json")
        )
        return decode_record(text) if text is not None else None

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        return await self._by_index(self.keys.request(request_id))

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        return await self._by_index(self.keys.payment(str(key)))

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        return await self._by_index(self.keys.tx(tx_claim_key(tx_hash)))

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        for _ in range(MAX_ROUNDS):
            record, version = await self._read(request.challenge_id)
            mismatch = check_state(record, request)
            if mismatch is not None:
                return mismatch
            assert record is not None  # check_state answers for a missing record
            updated = record.apply(request.changes, request.to, request.at, request.reason)
            reply = await self._script(
                "TRANSITION", **self._transition_call(record, updated, version, request)
            )
            outcome = reply[0]
            if outcome == "applied":
                return TransitionApplied(updated)
            if outcome == "payment":
                return PaymentClaimed(str(reply[1]))
            if outcome == "tx":
                return TxClaimed(str(reply[1]))
            if outcome == "missing":
                return StateMismatch(None)
            # "stale": another write landed between our read and our script.
        log.error("redis store: transition of %s kept losing races", request.challenge_id)
        raise StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)

    def _transition_call(
        self,
        record: ChallengeRecord,
        updated: ChallengeRecord,
        version: str,
        request: TransitionRequest,
    ) -> dict[str, list[Any]]:
        """KEYS and ARGV of ``scripts.TRANSITION``; unused key slots repeat the record's."""
        k = self.keys
        own = k.challenge(record.challenge_id)
        claim, tx = claim_keys(request)
        released = key_to_release(record, request)
        payer_before, payer_after = payer_of(record), payer_of(updated)
        return {
            "keys": [
                own,
                k.payment(claim) if claim else own,
                k.tx(tx) if tx else own,
                k.payment(released) if released else own,
                k.claims(record.challenge_id),
                k.request(record.request_id),
                k.by_updated,
                k.by_state(record.state),
                k.by_state(updated.state),
                k.by_payer(payer_before) if payer_before else own,
                k.by_payer(payer_after) if payer_after else own,
            ],
            "args": [
                version,
                record.challenge_id,
                encode_record(updated),
                updated.state.value,
                repr(updated.updated_at),
                self.options.record_ttl_seconds,
                "1" if claim else "0",
                "1" if tx else "0",
                "1" if released else "0",
                payer_before or "",
                payer_after or "",
            ],
        }

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        wanted = _states(states)
        if wanted == [] or limit <= 0:
            return []
        highest = "+inf" if updated_before is None else f"({updated_before!r}"
        cursor = ["", ""] if after is None else [repr(float(after[0])), after[1]]
        texts = await self._script(
            "LIST",
            keys=[],
            args=[
                self.keys.prefix,
                highest,
                limit,
                "0" if wanted is None else "1",
                *cursor,
                *(wanted or []),
            ],
        )
        return [decode_record(text) for text in texts]

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        wanted = _states(states)
        if not wanted or limit <= 0:
            return 0
        deleted = await self._script(
            "PRUNE",
            keys=[self.keys.by_updated],
            args=[self.keys.prefix, f"({updated_before!r}", limit, *wanted],
        )
        return int(deleted)

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        wanted = _states(states)
        if wanted == [] or limit <= 0:
            return []
        owner = payer.lower() if payer is not None else ""
        if not nameable(owner) or (before is not None and not nameable(before[1])):
            return []
        cursor = ["", ""] if before is None else [repr(float(before[0])), before[1]]
        texts = await self._script(
            "FIND",
            keys=[],
            args=[self.keys.prefix, limit, *cursor, owner, *(wanted or [])],
        )
        return [decode_record(text) for text in texts]

    # ------------------------------------------------------------ tasks

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        text = encode_task(document)
        version = await self._script(
            "SAVE_TASK",
            keys=[self.keys.task(task_id), self.keys.tasks_by_prune],
            args=[
                text,
                "" if expect_version is None else str(int(expect_version)),
                self.options.record_ttl_seconds,
                task_id,
                "" if prune_after is None else repr(float(prune_after)),
            ],
        )
        return int(version) if version is not None else None

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        if not nameable(task_id):
            return None
        found = await self._call(
            "get_task", self._redis().hmget(self.keys.task(task_id), ["doc", "ver"])
        )
        if found[0] is None or found[1] is None:
            return None
        return decode_task(found[0]), int(found[1])

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        if limit <= 0:
            return 0
        deleted = await self._script(
            "PRUNE_TASKS",
            keys=[self.keys.tasks_by_prune],
            args=[self.keys.prefix, f"({float(before)!r}", limit],
        )
        return int(deleted)

    # ------------------------------------------------------------ hit counters

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        """One script for every key of the call: one round trip on the unpaid path.

        The expiry is relative (``PEXPIRE window_end - now``), not ``EXPIREAT``:
        the caller's clock defines the window, and Redis's own clock may differ.
        """
        if not hits:
            return {}
        keys = list(hits)
        ttl_ms = max(1, math.ceil((window_end - now) * 1000))
        totals = await self._script(
            "COUNT_HITS",
            keys=[self.keys.hits(key) for key in keys],
            args=[repr(float(now)), repr(float(window_end)), ttl_ms, *(int(hits[k]) for k in keys)],
        )
        return {key: int(total) for key, total in zip(keys, totals, strict=True)}

    # ------------------------------------------------------------ analytics counters

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        """One script per call: every bucket's ``HINCRBY`` and a few old buckets forgotten."""
        triples = [
            value
            for (bucket, name), delta in counts.items()
            for value in (str(int(bucket)), name, int(delta))
        ]
        await self._script(
            "ADD_COUNTS",
            keys=[self.keys.count_buckets],
            args=[self.keys.prefix, int(forget_before), SWEEP_BUCKETS, *triples],
        )

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        flat = await self._script(
            "READ_COUNTS",
            keys=[self.keys.count_buckets],
            args=[self.keys.prefix, int(start), int(end)],
        )
        return {(int(flat[i]), str(flat[i + 1])): int(flat[i + 2]) for i in range(0, len(flat), 3)}

    # ------------------------------------------------------------ leases

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        expires_at = now + ttl
        reply = await self._script(
            "ACQUIRE_LEASE",
            keys=[self.keys.lease(name)],
            args=[holder, repr(now), repr(expires_at)],
        )
        if reply is None:
            return None
        return Lease(name, holder, int(reply[0]), expires_at, reply[1])

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        released = await self._script(
            "RELEASE_LEASE",
            keys=[self.keys.lease(lease.name)],
            args=[lease.holder, str(lease.fence), value or "", "0" if value is None else "1"],
        )
        return int(released) == 1

    async def held_lease(self, name: str, now: float) -> Lease | None:
        holder, fence, expires_at, released, value = await self._call(
            "held_lease",
            self._redis().hmget(
                self.keys.lease(name), ["holder", "fence", "expires_at", "released", "value"]
            ),
        )
        if holder is None or released != "0" or float(expires_at) <= now:
            return None
        return Lease(name, holder, int(fence), float(expires_at), value)

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        expires_at = now + ttl
        reply = await self._script(
            "TAKE_OVER_LEASE",
            keys=[self.keys.lease(held.name)],
            args=[held.holder, str(held.fence), holder, repr(expires_at)],
        )
        if reply is None:
            return None
        return Lease(held.name, holder, int(reply[0]), expires_at, reply[1])

    # ------------------------------------------------------------ plumbing

    async def _read(self, challenge_id: str) -> tuple[ChallengeRecord | None, str]:
        text, version = await self._call(
            "transition", self._redis().hmget(self.keys.challenge(challenge_id), ["json", "ver"])
        )
        if text is None or version is None:
            return None, ""
        return decode_record(text), str(version)

    async def _by_index(self, index_key: str) -> ChallengeRecord | None:
        """The record an index key points at; ``None`` for a key Redis cannot be sent."""
        if not nameable(index_key):
            return None
        text = await self._script("BY_INDEX", keys=[index_key], args=[self.keys.prefix])
        return decode_record(text) if text is not None else None

    async def _script(self, name: str, *, keys: list[str], args: list[Any]) -> Any:
        script = self._scripts.get(name) if self._client is not None else None
        if script is None:
            log.error("redis store: %s called while the store is closed", name.lower())
            raise StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
        if name in self._waited:
            options = self.options
            return await self._call(
                name.lower(),
                run_waited(
                    self._redis(),
                    script,
                    keys,
                    args,
                    options.wait_replicas,
                    options.wait_timeout_seconds,
                ),
            )
        return await self._call(name.lower(), script(keys=keys, args=args))

    async def _call(self, op: str, command: Awaitable[Any]) -> Any:
        with converted(op, self.url):
            return await command

    def _redis(self) -> Redis:
        if self._client is None:
            log.error("redis store: used while closed")
            raise StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
        return self._client


@dataclass(frozen=True, slots=True)
class _Create:
    """One ``create_challenge`` call, encoded by its caller (a bad record fails alone)."""

    record: ChallengeRecord
    json: str
    claim: str  # the payment claim's key, "" for none


def _created(create: _Create, reply: Any) -> Created | Exception:
    """One record's outcome from ``scripts.CREATE``'s reply."""
    if reply == 1:
        return create.record, True
    if isinstance(reply, str):
        return decode_record(reply), False
    if isinstance(reply, list):
        return PaymentClaimed(str(reply[0]))
    return ValueError(f"challenge_id {create.record.challenge_id} already exists")


def _states(states: Sequence[State] | None) -> list[str] | None:
    """Distinct state names in the order given; ``None`` means every state."""
    return None if states is None else state_values(states)
