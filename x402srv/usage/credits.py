"""Metering: a grant's calls counted and its credits spent where the calls happen.

Plans that sell calls (``calls``) or limit them (``rate_limit``) are metered on
every call, by whoever answers it: the gateway, the ASGI middleware and the
Sanic guard when given a ``Meter``, or any code that calls ``Meter.spend``
(``spend_sync`` outside an event loop). One call is one ``CreditStore.spend``,
one store round trip, atomic across every worker and instance:

- rate window full -> ``CallsThrottled`` (429, ``Retry-After``), nothing spent;
- credits below the call's cost -> ``CreditsExhausted`` (402), nothing spent;
- else the call goes on with a ``Usage``: its ``headers()`` are the IETF
  ``RateLimit-Policy`` and ``RateLimit`` fields (draft-ietf-httpapi-ratelimit-
  headers) the answer carries, and ``refund(usage)`` gives the credits back
  when the call failed on the seller's side (``refunds(status)``: a 5xx, if
  ``refund_on_5xx``).

The fields name two policies: ``"credits"`` (``q`` = the calls a purchase adds,
``w`` = the plan's period; ``r`` = the grant's balance, ``t`` = seconds until
its token expires) and ``"rate"`` (``q``/``w`` = the rate limit; ``r`` = calls
left in the window, ``t`` = seconds until it ends). A route's ``cost`` counts
as that many requests of the ``"credits"`` quota.

A grant is its purchase's challengeId, the token's ``jti``: a top-up adds to the
same grant, so the token the buyer holds keeps working.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Self, TypeVar, cast

from x402srv.config.models import Config, Plan
from x402srv.config.plans import CREDITS_OUTLIVE_TOKEN_SECONDS
from x402srv.errors import CallsThrottled, ConfigError, CreditsExhausted, StoreUnavailable
from x402srv.interfaces import (
    Clock,
    CreditStore,
    Spend,
    SpendOutcome,
    Store,
    UsageStore,
    UsedCall,
    keeps_credits,
    keeps_used_calls,
    system_clock,
)
from x402srv.server import metrics
from x402srv.server.tasks import detached, to_the_end
from x402srv.stores.credit_rules import USED_CALL_ROUTE
from x402srv.tokens.verify import AccessClaims

__all__ = ["Meter", "Usage", "ratelimit_fields"]

log = logging.getLogger("x402srv.usage.credits")

T = TypeVar("T")


def ratelimit_fields(
    plan: Plan,
    *,
    balance: int | None,
    window_calls: int,
    window_end: int,
    expires_at: float,
    now: float,
) -> dict[str, str]:
    """``RateLimit-Policy`` and ``RateLimit`` for a grant of ``plan`` (see the module docstring)."""
    policies: list[str] = []
    limits: list[str] = []
    if plan.calls is not None:
        policies.append(f'"credits";q={plan.calls};w={plan.token_ttl_seconds}')
        left = max(0, math.ceil(expires_at - now))
        limits.append(f'"credits";r={max(balance or 0, 0)};t={left}')
    if plan.rate is not None:
        policies.append(f'"rate";q={plan.rate.limit};w={plan.rate.seconds}')
        remaining = max(0, plan.rate.limit - window_calls)
        reset = max(0, math.ceil(window_end - now)) if window_end else plan.rate.seconds
        limits.append(f'"rate";r={remaining};t={reset}')
    if not policies:
        return {}
    return {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(limits)}


@dataclass(frozen=True, slots=True)
class Usage:
    """One metered call that went through: what it spent and what the buyer is told."""

    grant_id: str
    plan: Plan
    cost: int  # credits taken: 0 when the plan sells time (a rate limit only)
    balance: int | None
    window_calls: int
    window_end: int
    expires_at: float
    at: float

    def headers(self) -> dict[str, str]:
        """The ``RateLimit-Policy`` and ``RateLimit`` fields of this call's answer."""
        return ratelimit_fields(
            self.plan,
            balance=self.balance,
            window_calls=self.window_calls,
            window_end=self.window_end,
            expires_at=self.expires_at,
            now=self.at,
        )


class Meter:
    """Spends a grant's calls in the store; one per app (or per gateway) process.

    ``Meter(store, plans)`` meters with a store the caller opened;
    ``Meter.from_config(config)`` builds the store the config names (the same
    one x402srv credits) and opens it in ``start()`` (``async with``), or in
    ``start_sync()`` on a thread of its own for code without an event loop
    (``with``).
    """

    def __init__(
        self,
        store: Store,
        plans: Mapping[str, Plan],
        *,
        clock: Clock = system_clock,
        refund_on_5xx: bool = True,
        access_url: str | None = None,
        owns_store: bool = False,
    ) -> None:
        if any(plan.metered for plan in plans.values()) and not keeps_credits(store):
            raise ConfigError(f"the store {store.name!r} keeps no credits", path="store.backend")
        self.store = cast(CreditStore, store)
        self.plans = dict(plans)
        self.clock = clock
        self.refund_on_5xx = refund_on_5xx
        self.access_url = access_url
        self._owns_store = owns_store
        self._thread: _LoopThread | None = None
        self._keeps_used_calls = keeps_used_calls(store)
        self._usage_store = cast(UsageStore, store)

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        clock: Clock = system_clock,
        refund_on_5xx: bool = True,
    ) -> Meter:
        """A meter on the store ``config`` names; ``ConfigError`` if it cannot share credits."""
        from x402srv.server.registry import Registry

        if config.store.backend == "memory":
            raise ConfigError(
                "the memory store lives inside x402srv's process: an app's meter would see "
                "none of the credits x402srv adds; use sqlite (the same file) or redis",
                path="store.backend",
            )
        store = Registry().build_store(config, clock=clock)
        return cls(
            store,
            config.plan_map,
            clock=clock,
            refund_on_5xx=refund_on_5xx,
            access_url=config.access_url,
            owns_store=True,
        )

    # ------------------------------------------------------------ life cycle

    async def start(self) -> None:
        if self._owns_store:
            await self.store.start()

    async def close(self) -> None:
        if self._owns_store:
            await self.store.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def start_sync(self) -> Self:
        """Open the store on a thread with its own event loop, for ``spend_sync``."""
        if self._thread is None:
            self._thread = _LoopThread()
            self._thread.run(self.start())
        return self

    def close_sync(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            try:
                thread.run(self.close())
            finally:
                thread.stop()

    def __enter__(self) -> Self:
        return self.start_sync()

    def __exit__(self, *exc: object) -> None:
        self.close_sync()

    # ------------------------------------------------------------ calls

    def metered(self, plan_id: str) -> bool:
        plan = self.plans.get(plan_id)
        return plan is not None and plan.metered

    async def spend(self, claims: AccessClaims, cost: int = 1) -> Usage | None:
        """Meter one call of the grant ``claims`` name; ``None`` if its plan is not metered.

        Raises ``CallsThrottled`` (429) or ``CreditsExhausted`` (402) with the
        RateLimit fields, and ``StoreUnavailable`` (503) when the store is down.
        """
        plan = self.plans.get(claims.plan_id)
        if plan is None or not plan.metered:
            return None
        now = self.clock()
        sells_calls = plan.calls is not None
        spending = detached(
            self.store.spend(
                claims.challenge_id,
                cost,
                now=now,
                keep_until=claims.expires_at + CREDITS_OUTLIVE_TOKEN_SECONDS,
                rate=plan.rate,
                credits=sells_calls,
            )
        )
        try:
            spent = await asyncio.shield(spending)
        except asyncio.CancelledError:
            # The caller left (a buyer gone: Sanic cancels the handler) while the spend
            # ran: the call will never be made, so a spend that went through is given
            # back once it is done. Cancelled in the middle, a store could have written
            # it without anyone to release it (docs/selling-calls.md, "Charging by use").
            if sells_calls and cost:
                self._give_back_when_spent(spending, claims.challenge_id, cost)
            raise
        usage = Usage(
            grant_id=claims.challenge_id,
            plan=plan,
            cost=cost if sells_calls else 0,
            balance=spent.balance,
            window_calls=spent.window_calls,
            window_end=spent.window_end,
            expires_at=claims.expires_at,
            at=now,
        )
        if spent.outcome is SpendOutcome.SPENT:
            if usage.cost:
                metrics.current().credits_spent(plan.plan_id, usage.cost)
            return usage
        metrics.current().metered_refusal(plan.plan_id, spent.outcome.value)
        raise self._refusal(claims, plan, spent, usage, cost)

    def _give_back_when_spent(
        self, spending: asyncio.Future[Spend], grant_id: str, cost: int
    ) -> None:
        """Once ``spending`` is done: the credits back if it spent them (its caller left)."""

        def done(spending: asyncio.Future[Spend]) -> None:
            if spending.cancelled() or spending.exception() is not None:
                return  # (nothing spent: the store refused, or was down; it logged)
            if spending.result().outcome is not SpendOutcome.SPENT:
                return
            detached(self._unspend(grant_id, cost))

        spending.add_done_callback(done)

    async def _unspend(self, grant_id: str, cost: int) -> None:
        """A spend whose caller left, undone (it counted in neither metric: not a refund)."""
        try:
            await self.store.refund(grant_id, cost, now=self.clock())
        except StoreUnavailable:
            log.warning(
                "grant %s: %d credits of a call whose caller left not given back (store down)",
                grant_id,
                cost,
            )

    def _refusal(
        self, claims: AccessClaims, plan: Plan, spent: Spend, usage: Usage, cost: int
    ) -> CallsThrottled | CreditsExhausted:
        if spent.outcome is SpendOutcome.THROTTLED:
            assert plan.rate is not None
            return CallsThrottled(
                f"plan {plan.plan_id!r} allows {plan.rate.limit} calls per "
                f"{plan.rate.seconds} s per grant; retry after the window ends",
                retry_after=max(1, math.ceil(spent.window_end - usage.at)),
                headers=usage.headers(),
            )
        extra: dict[str, Any] = {"planId": plan.plan_id, "balance": spent.balance, "cost": cost}
        if self.access_url is not None:
            extra["topUp"] = {
                "url": self.access_url,
                "body": {"planId": plan.plan_id, "topUp": claims.request_id},
            }
        return CreditsExhausted(
            f"this grant has {spent.balance} credits left and the call costs {cost}; "
            f"pay for plan {plan.plan_id!r} again to top the same grant up (the token "
            "keeps working)",
            extra=extra,
            headers=usage.headers(),
        )

    def refunds(self, status: int) -> bool:
        """Whether a call answered with ``status`` gets its credits back."""
        return self.refund_on_5xx and status >= 500

    async def refund(self, usage: Usage) -> Usage:
        """Give a failed call's credits back; the usage as it is after (for the answer's fields).

        Called before the failed answer goes out, so the buyer's next call sees
        the credits back. A store outage only costs the buyer them (logged). It
        completes even if its caller is cancelled meanwhile (``to_the_end``).
        """
        if usage.cost == 0:
            return usage
        return await to_the_end(self._refund(usage))

    async def _refund(self, usage: Usage) -> Usage:
        try:
            balance = await self.store.refund(usage.grant_id, usage.cost, now=self.clock())
        except StoreUnavailable:
            log.warning("grant %s: %d credits not refunded (store down)", *_who(usage))
            return usage
        metrics.current().credits_refunded(usage.plan.plan_id, usage.cost)
        return replace(usage, cost=0, balance=balance)

    async def settle(self, usage: Usage, used: int, *, route: str) -> Usage:
        """Keep ``used`` of a reservation (``spend`` of the reserve) and give the rest back.

        A route or tool charged by use (docs/selling-calls.md, "Charging by use")
        spends its whole reserve before forwarding, so the reserve counts against
        the balance while the call runs; this is the one atomic step that gives
        back what the call did not use and, on a store that keeps them
        (``UsageStore``), records the call under ``route`` for ``challenges
        show`` and the console. ``used`` is capped at the reservation. A store
        outage costs the buyer the reservation (logged), as ``refund`` does. It
        completes even if its caller is cancelled meanwhile (``to_the_end``).
        """
        return await to_the_end(self._settle(usage, used, route))

    async def _settle(self, usage: Usage, used: int, route: str) -> Usage:
        used = max(0, min(used, usage.cost))
        release = usage.cost - used
        now = self.clock()
        try:
            if self._keeps_used_calls and usage.cost:
                call = UsedCall(now, route[:USED_CALL_ROUTE], usage.cost, used)
                balance = await self._usage_store.settle(
                    usage.grant_id, release, now=now, call=call
                )
            elif release:
                balance = await self.store.refund(usage.grant_id, release, now=now)
            else:
                return usage
        except StoreUnavailable:
            log.warning("grant %s: %d reserved credits not released (store down)", *_who(usage))
            return usage
        if release:
            metrics.current().credits_refunded(usage.plan.plan_id, release)
        return replace(usage, cost=used, balance=balance)

    # ------------------------------------------------------------ sync forms

    def spend_sync(self, claims: AccessClaims, cost: int = 1) -> Usage | None:
        """``spend`` for code without an event loop (after ``start_sync()``)."""
        return self._sync().run(self.spend(claims, cost))

    def refund_sync(self, usage: Usage) -> Usage:
        return self._sync().run(self.refund(usage))

    def _sync(self) -> _LoopThread:
        if self._thread is None:
            raise RuntimeError("call Meter.start_sync() (or use `with meter:`) first")
        return self._thread


def _who(usage: Usage) -> tuple[str, int]:
    return usage.grant_id, usage.cost


class _LoopThread:
    """An event loop on a daemon thread: the sync meter's store lives there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="x402srv-meter", daemon=True
        )
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        with contextlib.suppress(RuntimeError):
            self.loop.close()
