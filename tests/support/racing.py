"""A store that loses races on purpose, and a clock that only moves when told (STYLE 15).

``RacingStore`` wraps a real store and delegates every method to it. Armed with
``before_transition`` (or ``before_create``), it runs a competing action against
the real store just before the matching call: the Nth ``transition`` since
arming, or the first one a predicate picks. The request under test then makes
its compare-and-set against a record that has just moved, the way it would if
another worker, a retry or the reconciler had got there a moment earlier, but
at exactly that moment on every run instead of by timing luck.

It also keeps what tests assert on: every transition and its result, how often
each method was called, and the ids ``list_challenges`` handed out; and it lets
a test wait until some call has happened (a condition, never a sleep).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.interfaces import (
    CreditAccount,
    Credited,
    CreditStore,
    Lease,
    LeaseTakeoverStore,
    PaymentClaimed,
    RateWindow,
    Spend,
    Store,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
)
from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import OverRefund, RefundCreated, RefundMismatch, RefundMoved
from x402srv.refunds.store import RefundStore

__all__ = ["FrozenClock", "Race", "RacingStore", "moving", "states"]


class FrozenClock:
    """The pipeline's clock: it stands still until the test calls ``advance``."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def moving(expect: State, to: State, reason: str = "") -> Callable[[TransitionRequest], bool]:
    """Picks transitions from ``expect`` to ``to`` whose reason starts with ``reason``."""
    return lambda r: r.expect is expect and r.to is to and r.reason.startswith(reason)


def states(record: ChallengeRecord) -> list[State]:
    """The states a record went through, in order (its history)."""
    return [step.state for step in record.history]


@dataclass
class Race:
    """One armed race: which call it precedes, what it does, how often it fired."""

    method: str
    matches: Callable[[Any], bool]
    action: Callable[[Any], Awaitable[object]]
    times: int | None  # None: before every matching call
    fired: int = 0
    results: list[object] = field(default_factory=list)

    @property
    def spent(self) -> bool:
        return self.times is not None and self.fired >= self.times


def _nth(n: int) -> Callable[[Any], bool]:
    """A predicate true on its ``n``-th call only (1-based): the Nth call since arming."""
    seen = 0

    def matches(_: Any) -> bool:
        nonlocal seen
        seen += 1
        return seen == n

    return matches


class RacingStore:
    """Delegates to ``inner``; runs armed competitors just before the calls they precede."""

    name = "racing"

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.transitions: list[tuple[TransitionRequest, TransitionResult]] = []
        #: Every challenge id ``list_challenges`` returned, in order (a pass reads each once).
        self.listed: list[str] = []
        self._races: list[Race] = []
        self._racing = False
        self._waiters: list[tuple[str, int, bool, asyncio.Event]] = []
        #: Per method, the asyncio tasks (by id) that called it.
        self.callers: dict[str, set[int]] = {}

    # ------------------------------------------------------------ arming

    def before_transition(
        self,
        action: Callable[[TransitionRequest], Awaitable[object]],
        *,
        nth: int | None = None,
        when: Callable[[TransitionRequest], bool] | None = None,
        times: int | None = 1,
    ) -> Race:
        """Run ``action(request)`` just before the ``nth`` transition from now (or the
        first ``when`` picks; with ``times=None`` before every one it picks)."""
        return self._arm("transition", action, nth, when, times)

    def before_create(
        self,
        action: Callable[[ChallengeRecord], Awaitable[object]],
        *,
        when: Callable[[ChallengeRecord], bool] | None = None,
        times: int | None = 1,
    ) -> Race:
        """Run ``action(record)`` just before a ``create_challenge`` call ``when`` picks."""
        return self._arm("create_challenge", action, None, when, times)

    def _arm(
        self,
        method: str,
        action: Callable[[Any], Awaitable[object]],
        nth: int | None,
        when: Callable[[Any], bool] | None,
        times: int | None,
    ) -> Race:
        matches = _nth(nth) if nth is not None else when
        if matches is None or (nth is not None and when is not None):
            raise ValueError("give exactly one of nth= and when=")
        race = Race(method, matches, action, times)
        self._races.append(race)
        return race

    async def _race(self, method: str, argument: object) -> None:
        if self._racing:  # the competitor's own calls never trigger races
            return
        for race in self._races:
            if race.method != method or race.spent or not race.matches(argument):
                continue
            race.fired += 1
            self._racing = True
            try:
                race.results.append(await race.action(argument))
            finally:
                self._racing = False

    # ------------------------------------------------------------ waiting

    def _count(self, method: str) -> None:
        self.calls[method] += 1
        self.callers.setdefault(method, set()).add(id(asyncio.current_task()))
        for waiter in list(self._waiters):
            name, count, distinct, event = waiter
            if name == method and self._reached(method, count, distinct):
                event.set()
                self._waiters.remove(waiter)

    def forget_calls(self) -> None:
        """Count calls from here on only (``calls``, ``callers``, what ``called`` waits for)."""
        self.calls.clear()
        self.callers.clear()

    def _reached(self, method: str, count: int, distinct: bool) -> bool:
        seen = len(self.callers.get(method, ())) if distinct else self.calls[method]
        return seen >= count

    async def called(self, method: str, count: int = 1, *, tasks: bool = False) -> None:
        """Return once ``method`` has been called ``count`` times in all (with ``tasks``:
        by ``count`` different asyncio tasks, e.g. that many requests are now waiting)."""
        if self._reached(method, count, tasks):
            return
        event = asyncio.Event()
        self._waiters.append((method, count, tasks, event))
        await event.wait()

    def applied(self, challenge_id: str) -> list[TransitionRequest]:
        """The transitions of one challenge that went through this wrapper and applied."""
        return [
            request
            for request, result in self.transitions
            if request.challenge_id == challenge_id and isinstance(result, TransitionApplied)
        ]

    # ------------------------------------------------------------ the Store protocol

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self.inner.ping()

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        self._count("create_challenge")
        await self._race("create_challenge", record)
        return await self.inner.create_challenge(record, claim_payment=claim_payment)

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        self._count("get_challenge")
        return await self.inner.get_challenge(challenge_id)

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        self._count("get_by_request_id")
        return await self.inner.get_by_request_id(request_id)

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        self._count("get_by_payment")
        return await self.inner.get_by_payment(key)

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        self._count("get_by_tx_hash")
        return await self.inner.get_by_tx_hash(tx_hash)

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        self._count("transition")
        await self._race("transition", request)
        result = await self.inner.transition(request)
        self.transitions.append((request, result))
        return result

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        self._count("list_challenges")
        records = await self.inner.list_challenges(
            states=states, updated_before=updated_before, after=after, limit=limit
        )
        self.listed.extend(record.challenge_id for record in records)
        return records

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        self._count("prune")
        return await self.inner.prune(states=states, updated_before=updated_before, limit=limit)

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        self._count("save_task")
        return await self.inner.save_task(
            task_id, document, expect_version=expect_version, prune_after=prune_after
        )

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        self._count("get_task")
        return await self.inner.get_task(task_id)

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        self._count("prune_tasks")
        return await self.inner.prune_tasks(before=before, limit=limit)

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        self._count("count_hits")
        return await self.inner.count_hits(hits, window_end=window_end, now=now)

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        self._count("acquire_lease")
        return await self.inner.acquire_lease(name, holder, ttl, now)

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        self._count("release_lease")
        return await self.inner.release_lease(lease, value)

    async def held_lease(self, name: str, now: float) -> Lease | None:
        self._count("held_lease")
        if not isinstance(self.inner, LeaseTakeoverStore):
            return None
        return await self.inner.held_lease(name, now)

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        self._count("take_over_lease")
        if not isinstance(self.inner, LeaseTakeoverStore):
            return None
        return await self.inner.take_over_lease(held, holder, ttl, now)

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        self._count("find_challenges")
        return await self.inner.find_challenges(
            states=states, payer=payer, before=before, limit=limit
        )

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        self._count("add_counts")
        await self.inner.add_counts(counts, forget_before=forget_before)

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        self._count("read_counts")
        return await self.inner.read_counts(start=start, end=end)

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        self._count("credit")
        return await cast(CreditStore, self.inner).credit(
            grant_id, amount, key=key, now=now, keep_until=keep_until
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
        self._count("spend")
        return await cast(CreditStore, self.inner).spend(
            grant_id, cost, now=now, keep_until=keep_until, rate=rate, credits=credits
        )

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        self._count("refund")
        return await cast(CreditStore, self.inner).refund(grant_id, amount, now=now)

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        self._count("get_credits")
        return await cast(CreditStore, self.inner).get_credits(grant_id)

    # ------------------------------------------------------------ refunds (RefundStore)

    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        self._count("create_refund")
        return await cast(RefundStore, self.inner).create_refund(refund, paid=paid)

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        self._count("move_refund")
        return await cast(RefundStore, self.inner).move_refund(move)

    async def get_refund(self, refund_id: str) -> RefundRecord | None:
        return await cast(RefundStore, self.inner).get_refund(refund_id)

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        return await cast(RefundStore, self.inner).list_refunds(
            purchase_id=purchase_id, states=states, after=after, limit=limit
        )

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        await cast(RefundStore, self.inner).import_refunds(refunds)
