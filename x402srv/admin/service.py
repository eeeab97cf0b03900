"""What the console can see and do, as plain documents: the JSON API and the pages share it.

Every read is bounded: figures come from the store's per-hour counters
(``x402srv.usage.figures``), lists are one ``find_challenges`` page (newest
first, a cursor for the next), a search is one index lookup. The two
writes are the state machine's own moves: cancelling is PENDING ->
CANCELLED, revoking is ``x402srv.refunds.running.revoke``.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any, cast

from x402srv.access import reconciler
from x402srv.access.given_back import cancel_waits
from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import ChallengeRecord, State
from x402srv.admin.views import (
    PURCHASE_STATES,
    challenge_view,
    decode_cursor,
    encode_cursor,
    grant_view,
    purchase_detail,
    purchase_view,
    usage_view,
)
from x402srv.errors import InvalidRequest, NotFound, NotReady, StateConflict
from x402srv.interfaces import (
    CreditStore,
    keeps_credits,
)
from x402srv.refunds.running import revoke
from x402srv.server.health import Readiness
from x402srv.usage import figures, sales
from x402srv.usage.counters import HOUR
from x402srv.wire.offers import rfc3339

__all__ = ["MAX_LIMIT", "AdminService", "Page"]

MAX_LIMIT = 200
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_TX_HASH = re.compile(r"0x[0-9a-fA-F]{64}")

Page = dict[str, Any]


def _limit(value: str | None, default: int = 50) -> int:
    if value is None or value == "":
        return default
    try:
        limit = int(value)
    except ValueError:
        raise InvalidRequest("limit must be a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def _state(value: str | None) -> State | None:
    if not value:
        return None
    try:
        return State(value.upper())
    except ValueError:
        names = ", ".join(s.value for s in State)
        raise InvalidRequest(f"state must be one of {names}") from None


class AdminService:
    def __init__(self, pipeline: AccessPipeline, readiness: Readiness) -> None:
        self.pipeline = pipeline
        self.store = pipeline.store
        self.config = pipeline.config
        self.readiness = readiness

    def _now(self) -> float:
        return self.pipeline.clock()

    async def _counts(self, window: figures.Period) -> dict[tuple[int, str], int]:
        # This process's own counts first, so what it answered shows at once.
        await self.pipeline.counters.flush()
        return await self.store.read_counts(start=window.start, end=window.end)

    # ------------------------------------------------------------ figures

    async def revenue(self, start: str | None, end: str | None, bucket: str | None) -> Page:
        window = figures.period(self._now(), start, end, bucket)
        return figures.revenue(await self._counts(window), window, self.config)

    async def funnel(self, start: str | None, end: str | None) -> Page:
        window = figures.period(self._now(), start, end, "hour" if start is None else None)
        return {**window.describe(), **figures.funnel(await self._counts(window))}

    async def overview(self, start: str | None, end: str | None, bucket: str | None) -> Page:
        """Revenue over time, the funnel, settler health and the MCP tools sold (if any)."""
        window = figures.period(self._now(), start, end, bucket)
        counts = await self._counts(window)
        page: Page = {
            "revenue": figures.revenue(counts, window, self.config),
            "funnel": {**window.describe(), **figures.funnel(counts)},
            "settlers": await self.settlers(),
        }
        if self.config.mcp:  # calls and credits per tool (docs/mcp.md)
            page["tools"] = figures.tool_figures(counts)
        return page

    async def settlers(self) -> Page:
        """Every settler now (readiness: its check, its breaker when its network fails over)
        and the settlement calls of the last hour and day, by outcome and mean time."""
        now = self._now()
        day_start, day_end = figures.last_hours(now, 24)
        counts = await self.store.read_counts(start=day_start, end=day_end)
        last_hour = {key: n for key, n in counts.items() if key[0] >= day_end - HOUR}
        try:
            ready: dict[str, Any] = await self.readiness.check()
        except NotReady as exc:  # the document of a failing check rides on the error
            ready = {"status": "not ready", **exc.extra}
        return {
            "strategy": self.pipeline.settler.name,
            "ready": ready.get("status") == "ready",
            "checks": ready.get("checks", {}),
            "settlers": ready.get("settlers", []),
            "lastHour": figures.settler_figures(last_hour),
            "last24Hours": figures.settler_figures(counts),
        }

    # ------------------------------------------------------------ purchases and grants

    async def purchases(
        self, query: str | None, state: str | None, cursor: str | None, limit: str | None
    ) -> Page:
        """Newest purchases first, or a search: payer address, txHash, requestId, challengeId."""
        wanted = _state(state)
        states = [wanted] if wanted is not None else list(PURCHASE_STATES)
        page_size = _limit(limit)
        before = decode_cursor(cursor)
        now = self._now()
        text = (query or "").strip()
        if text and not _ADDRESS.fullmatch(text):
            found = await self._lookup(text)
            if wanted is not None:
                found = [r for r in found if r.state is wanted]
            return {
                "items": [purchase_view(r, self.config, now) for r in found],
                "nextCursor": None,
                "query": text,
            }
        records = await self.store.find_challenges(
            states=states, payer=text or None, before=before, limit=page_size
        )
        return self._page(
            [purchase_view(r, self.config, now) for r in records], records, page_size, text
        )

    async def _lookup(self, text: str) -> list[ChallengeRecord]:
        if _TX_HASH.fullmatch(text):
            record = await self.store.get_by_tx_hash(text)
            return [record] if record is not None else []
        try:
            uuid.UUID(text)
        except ValueError:
            raise InvalidRequest(
                "q must be a payer address (0x + 40 hex), a txHash (0x + 64 hex), "
                "a requestId or a challengeId"
            ) from None
        found = []
        for record in (
            await self.store.get_challenge(text),
            await self.store.get_by_request_id(text),
        ):
            if record is not None and record not in found:
                found.append(record)
        return found

    @staticmethod
    def _page(
        items: list[dict[str, Any]], records: list[ChallengeRecord], size: int, query: str = ""
    ) -> Page:
        more = len(records) == size
        page: Page = {"items": items, "nextCursor": encode_cursor(records[-1]) if more else None}
        if query:
            page["query"] = query
        return page

    async def purchase(self, challenge_id: str) -> Page:
        record = await self.store.get_challenge(challenge_id)
        if record is None:
            raise NotFound(f"no challenge {challenge_id}")
        detail = purchase_detail(record, self.config, self._now())
        detail["usage"] = await self._usage(record) if record.state is State.DELIVERED else None
        return detail

    async def grants(self, payer: str | None, cursor: str | None, limit: str | None) -> Page:
        """Delivered grants, newest first: time left, usage, revoked or not."""
        size = _limit(limit)
        owner = (payer or "").strip() or None
        if owner is not None and not _ADDRESS.fullmatch(owner):
            raise InvalidRequest("payer must be an address (0x + 40 hex)")
        found = await self.store.find_challenges(
            states=[State.DELIVERED], payer=owner, before=decode_cursor(cursor), limit=size
        )
        records = [r for r in found if r.top_up_of is None]  # a top-up adds to a grant
        now = self._now()
        usages = await asyncio.gather(*(self._usage(r) for r in records))
        items = [grant_view(r, self.config, now, u) for r, u in zip(records, usages, strict=True)]
        return self._page(items, found, size)

    async def _usage(self, record: ChallengeRecord) -> dict[str, Any] | None:
        """The grant's credits, when its plan is metered and the store keeps them."""
        plan = self.config.plan_map.get(record.plan_id)
        if plan is None or not plan.metered or not keeps_credits(self.store):
            return None
        store = cast(CreditStore, self.store)
        return usage_view(await store.get_credits(record.challenge_id), plan.calls)

    async def revoke(self, challenge_id: str, reason: str | None, who: str) -> Page:
        why = (reason or "").strip()[:120] or "no reason given"
        record, revoked_now = await revoke(self.pipeline, challenge_id, reason=f"by {who}: {why}")
        return {
            **grant_view(record, self.config, self._now(), await self._usage(record)),
            "revokedNow": revoked_now,
        }

    # ------------------------------------------------------------ challenges

    async def challenges(self, state: str | None, cursor: str | None, limit: str | None) -> Page:
        wanted = _state(state)
        size = _limit(limit)
        records = await self.store.find_challenges(
            states=[wanted] if wanted is not None else None,
            before=decode_cursor(cursor),
            limit=size,
        )
        now = self._now()
        return self._page([challenge_view(r, now) for r in records], records, size)

    async def cancel(self, challenge_id: str, who: str) -> Page:
        """PENDING -> CANCELLED; cancelling a cancelled challenge again is a no-op."""
        record, now = await self.pipeline.cancel(challenge_id, f"cancelled by {who}")
        if record.state is State.CANCELLED:
            return {**challenge_view(record, self._now()), "cancelledNow": now}
        if record.state is State.PENDING:
            raise StateConflict(cancel_waits(record))
        raise StateConflict(
            f"challenge {challenge_id} is {record.state.value}; only a PENDING "
            "challenge can be cancelled"
        )

    # ------------------------------------------------------------ accounting

    async def export(self, start: str | None, end: str | None, form: str | None) -> tuple[str, str]:
        """The sales of ``[from, to)`` as (file name, text): ``x402srv.usage.sales``."""
        if not start:
            raise InvalidRequest("from is required (the first instant of the export)")
        if form not in (None, "", "csv", "jsonl"):
            raise InvalidRequest("format must be csv or jsonl")
        chosen: sales.Format = "jsonl" if form == "jsonl" else "csv"
        since = figures.parse_time(start, "from")
        until = figures.parse_time(end, "to") if end else self._now()
        if since >= until:
            raise InvalidRequest("from must be before to")
        rows = await sales.sale_rows(self.store, self.config, since, until)
        stamp = f"{rfc3339(since)}_{rfc3339(until)}".replace(":", "")
        return f"sales_{stamp}.{chosen}", sales.render(rows, chosen)

    # ------------------------------------------------------------ the reconciler

    async def reconciler_status(self) -> Page:
        """The last pass (from any instance), what is unresolved now, and what is owed.

        ``owed``: payments that delivered nothing (OWED, a top-up whose grant
        was revoked or expired first), newest first: money the seller owes back.
        """
        options = self.config.reconciler
        now = self._now()
        waiting = await self.store.find_challenges(
            states=[State.SETTLING, State.PAID], limit=MAX_LIMIT
        )
        unresolved = []
        for record in waiting:
            lease = record.payment.lease_until if record.payment is not None else None
            unresolved.append(
                {
                    **purchase_view(record, self.config, now),
                    "leaseUntil": rfc3339(lease) if lease is not None else None,
                    "stuck": lease is None or lease + options.grace_seconds <= now,
                }
            )
        owed = await self.store.find_challenges(states=[State.OWED], limit=MAX_LIMIT)
        last = await reconciler.last_pass(self.store)
        if last is not None:
            for key in ("startedAt", "finishedAt"):
                if isinstance(last.get(key), int | float):
                    last[key] = rfc3339(last[key])
        return {
            "enabled": options.enabled,
            "intervalSeconds": options.interval_seconds,
            "lastPass": last,
            "unresolved": unresolved,
            "owed": [purchase_view(record, self.config, now) for record in owed],
        }
