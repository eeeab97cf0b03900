"""The counters: a dict increment on the hot path, per-hour counters in the store.

Each process counts what it answers in memory, per hour and name, and adds
its counts to the store's counters (``Store.add_counts``) in one call every
``[analytics] flush_seconds``, right after a payment settles (so revenue is in
the store within milliseconds), and when the server stops. A flood of unpaid
requests therefore costs a dict increment each and moves a handful of
counters once per flush: never a row, never a store round trip per request.
A process killed outright loses what it counted since its last flush (at most
``flush_seconds`` of unpaid traffic; settled payments are flushed at once).

Names (``x402srv.usage.figures`` reads them back). Plan ids, networks, assets, amounts
and settler names come from the config; failure reasons may come from a
facilitator, so they are cleaned to ``[a-z0-9_.:-]`` and, past
``MAX_REASONS`` distinct ones per hour, counted as ``failed:other``: an hour
holds a bounded set of counters whatever the traffic.

    unpaid                      unpaid requests (discovery, challenges, gateway 402s, A2A)
    limited                     of which refused 429 RATE_LIMITED
    challenge:<plan>            challenges created
    tried:<plan>                payments checked against the offer (pipeline step 5)
    failed:<reason>             payments refused: the x402 reason, ``already_redeemed``,
                                or the settler's reason for a definite failure
    settled:<plan>|<network>|<asset>|<amount>
                                SETTLING -> PAID; revenue is the count times the amount
    delivered:<plan>            PAID -> DELIVERED
    owed:<plan>                 PAID -> OWED: paid, nothing delivered, owed back to the buyer
    revoked:<plan>              grants revoked (``x402srv.tokens.revocation``)
    refunded:<who>              refunds on-chain by who asked: operator, auto (``x402srv.refunds``)
    refund:<plan>|<network>|<asset>
                                their amount in atomic units (revenue is net of it)
    settler:<name>:<outcome>    settler calls by outcome (settled, rejected, unknown)
    settler:<name>:ms           milliseconds spent in those calls
    tool:<tool>:<outcome>       MCP tool calls by outcome (``x402srv.gateway.mcp``); tools
                                the config does not list count as ``(unlisted)``
    tool:<tool>:credits         credits those calls spent, refunds taken off
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable

from x402srv.access.records import ChallengeRecord, State
from x402srv.errors import StoreUnavailable
from x402srv.interfaces import Clock, Store

__all__ = ["BUYER_SIDE_OUTCOMES", "HOUR", "MAX_REASONS", "Counters", "clean", "hour_of"]

log = logging.getLogger("x402srv.usage.counters")

HOUR = 3600
#: Distinct failure reasons one process counts per hour; more become ``failed:other``.
MAX_REASONS = 64
#: Settlement outcomes that are the buyer's doing, with what the console calls them: shown
#: apart from the settler's own failures, never in red under its health.
BUYER_SIDE_OUTCOMES = {"refused": "payments refused (buyer's side)"}
_UNCLEAN = re.compile(r"[^a-z0-9_.:-]+")


def hour_of(at: float) -> int:
    """The bucket ``at`` falls in: the start of its UTC hour, in seconds since the epoch."""
    return int(at // HOUR) * HOUR


def clean(text: str, *, limit: int = 64) -> str:
    """A name part from text we do not control (a settler's reason): bounded and plain."""
    return _UNCLEAN.sub("_", text.strip().lower())[:limit] or "unknown"


class Counters:
    """One process's counts since its last flush, and the flushing."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        keep_seconds: float = 400 * 86_400,
    ) -> None:
        self.store = store
        self.clock = clock
        self.keep_seconds = keep_seconds
        self._counts: dict[tuple[int, str], int] = {}
        self._reasons: dict[int, set[str]] = {}  # failure reasons seen per hour (the bound)
        self._kicked: asyncio.Task[None] | None = None
        #: One flush at a time: a flush returns only once every count taken before it
        #: reached the store (the console flushes, then reads what the store holds).
        self._flushing = asyncio.Lock()
        #: Called after every flush that reached the store (tests wait on it).
        self.flushed: Callable[[], None] | None = None

    # ------------------------------------------------------------ counting (hot path)

    def add(self, name: str, n: int = 1) -> None:
        """Count ``n`` under ``name``, a name built from the config (see the docstring)."""
        key = (hour_of(self.clock()), name)
        self._counts[key] = self._counts.get(key, 0) + n

    def failed(self, reason: str) -> None:
        """A refused payment; ``reason`` may be anyone's text, so it is cleaned and bounded."""
        hour, name = hour_of(self.clock()), clean(reason)
        seen = self._reasons.setdefault(hour, set())
        if name not in seen:
            if len(seen) >= MAX_REASONS:
                name = "other"
            else:
                seen.add(name)
        self.add(f"failed:{name}")

    def settler(self, name: str, outcome: str, seconds: float) -> None:
        """One settlement call: ``outcome`` is ``settled``, ``refused`` (the buyer's payment:
        not enough balance, a used nonce), ``rejected`` (the settler could not) or ``unknown``."""
        settler = clean(name)
        self.add(f"settler:{settler}:{clean(outcome)}")
        self.add(f"settler:{settler}:ms", round(seconds * 1000))

    def observe(self, record: ChallengeRecord) -> None:
        """A transition that applied (``Mover`` observer): settled and delivered are counted."""
        history = record.history
        if len(history) < 2:
            return
        before, now = history[-2].state, record.state
        if now is State.PAID and before is State.SETTLING:
            self.add(f"settled:{record.plan_id}|{record.network}|{record.asset}|{record.amount}")
            self.kick()
        elif now is State.DELIVERED and before is State.PAID:
            self.add(f"delivered:{record.plan_id}")
        elif now is State.OWED and before is State.PAID:
            self.add(f"owed:{record.plan_id}")

    # ------------------------------------------------------------ flushing

    async def flush(self) -> None:
        """Add what was counted to the store's counters; kept for the next try if it fails.

        A flush under way (the background one, a kick) is waited for first: its counts
        were taken out of this process already, and the caller reads the store next.
        """
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        if not self._counts:
            return
        counts, self._counts = self._counts, {}
        now = hour_of(self.clock())
        self._reasons = {hour: seen for hour, seen in self._reasons.items() if hour >= now}
        forget = hour_of(self.clock() - self.keep_seconds)
        try:
            await self.store.add_counts(counts, forget_before=forget)
        except StoreUnavailable:
            log.warning("counters: the store is unavailable; the counts wait for the next flush")
            for key, n in counts.items():
                self._counts[key] = self._counts.get(key, 0) + n
            return
        if self.flushed is not None:
            self.flushed()

    def kick(self) -> None:
        """Flush soon, without making the caller wait (a payment just settled)."""
        if self._kicked is not None and not self._kicked.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._kicked = loop.create_task(self._flush_logged(), name="x402srv-counters-kick")

    async def _flush_logged(self) -> None:
        try:
            await self.flush()
        except Exception:
            log.exception("counters: flushing the counts failed")

    async def run_forever(self, interval: float) -> None:
        """The server's background task: a flush every ``interval`` seconds."""
        while True:
            await asyncio.sleep(interval)
            await self._flush_logged()

    async def stop(self) -> None:
        """The last flush, when the server stops."""
        if self._kicked is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._kicked
        await self._flush_logged()
