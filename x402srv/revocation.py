"""Revoking a grant, and every verifier refusing it within a bounded time.

Revoking (``revoke_grant``: the admin API, ``x402srv grants revoke``) does two
things, in this order, each safe to repeat:

1. The grant's ``challengeId`` (its tokens' ``jti``) goes into the store's
   revocation list, with the time its last token expires: past that nothing
   is left to refuse and the entry leaves the list.
2. The record moves DELIVERED -> DELIVERED with ``revoked_at`` and a
   "revoked" line in its history (a compare-and-set on its attempt, so two
   admins revoking at once write one line). The buyer's replay of the
   purchase then answers 410 ``GRANT_REVOKED`` instead of the grant.

Step 1 first: a crash between the two leaves the token refused, and revoking
again writes the history line; the other way round a record could say
"revoked" while its token still opened the API. Revoking again is a no-op
that answers the same revocation.

The list is one small document in the store (``Store.save_task``, the
versioned compare-and-set document the A2A tasks use, under an id no client
can name): revocations are rare operator acts, and only live tokens are
listed. Verifiers read it two ways:

- ``StoreRevocations``: inside x402srv (the gateway), from the store, read
  again at most ``[revocation] refresh_seconds`` after the last read, by the
  request that finds it stale (concurrent requests share that read). Every
  instance on the same store therefore refuses a revoked token within
  ``refresh_seconds``.
- ``RevocationList``: anywhere else (a FastAPI or Flask API that holds only
  the JWKS, or the shared secret), from ``/.well-known/x402srv-revocations.json``,
  which x402srv serves from the store; the same lazy refresh over HTTP. If a
  fetch fails the last list stays in use (a warning is logged) unless
  ``max_stale_seconds`` says how old a list may get before tokens are
  answered 503 ``REVOCATIONS_UNAVAILABLE``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import httpx

from .errors import NotFound, RevocationsUnavailable, StateConflict, StoreUnavailable
from .ids import uuid4_hex
from .interfaces import (
    Clock,
    StateMismatch,
    Store,
    TransitionApplied,
    TransitionRequest,
    system_clock,
)
from .jwks import checked_url
from .records import ChallengeRecord, RecordChanges, State

if TYPE_CHECKING:
    from .config import Config
    from .pipeline import AccessPipeline

__all__ = [
    "DOCUMENT_ID",
    "LIST_PATH",
    "RevocationBook",
    "RevocationList",
    "StoreRevocations",
    "revoke_grant",
    "token_lifetime_end",
]

log = logging.getLogger("x402srv.revocation")

#: The store document that holds the list (no A2A task id can be this: those are UUIDs).
DOCUMENT_ID: Final = "x402srv.revocations"
#: Where x402srv publishes the list for verifiers that cannot read its store.
LIST_PATH: Final = "/.well-known/x402srv-revocations.json"
#: Verifiers may accept a token this long past its ``exp`` (their clock leeway, at most).
LEEWAY_SECONDS: Final = 300
#: Rounds of read-modify-write one change of the list may lose before giving up.
MAX_ROUNDS: Final = 32


def token_lifetime_end(record: ChallengeRecord, now: float) -> float:
    """Until when a token of this grant may still be accepted somewhere (its ``exp`` + leeway)."""
    expires = (record.grant or {}).get("expiresAt")
    if isinstance(expires, str):
        try:
            at = dt.datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
        except ValueError:
            at = None
        if at is not None:
            return max(at, now) + LEEWAY_SECONDS
    # An issuer that said nothing about expiry: keep it listed for a day after revocation.
    return now + 86_400


class RevocationBook:
    """The store's revocation list: ``{challengeId: until}`` in one versioned document."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self) -> tuple[dict[str, float], int | None]:
        """Every entry (expired ones too) and the document's version (None: no list yet)."""
        stored = await self.store.get_task(DOCUMENT_ID)
        if stored is None:
            return {}, None
        document, version = stored
        revoked = document.get("revoked")
        if not isinstance(revoked, dict):
            return {}, version
        return {str(k): float(v) for k, v in revoked.items() if isinstance(v, int | float)}, version

    async def active(self, now: float) -> dict[str, float]:
        """The grants whose tokens may still be presented: those verifiers must refuse."""
        entries, _ = await self.read()
        return {challenge_id: until for challenge_id, until in entries.items() if until > now}

    async def add(self, challenge_id: str, until: float, now: float) -> None:
        """Put ``challenge_id`` on the list until ``until``; dropping entries past their time."""
        for _ in range(MAX_ROUNDS):
            entries, version = await self.read()
            kept = {k: v for k, v in entries.items() if v > now}
            if kept.get(challenge_id, -math.inf) >= until and len(kept) == len(entries):
                return
            kept[challenge_id] = max(until, kept.get(challenge_id, until))
            saved = await self.store.save_task(
                DOCUMENT_ID, {"revoked": kept}, expect_version=version, prune_after=None
            )
            if saved is not None:
                return
        raise StoreUnavailable("the revocation list kept changing; retry", retry_after=1)


async def revoke_grant(
    pipeline: AccessPipeline, challenge_id: str, *, reason: str = "revoked by the seller"
) -> tuple[ChallengeRecord, bool]:
    """Revoke the grant of ``challenge_id``; (the record, whether this call revoked it).

    Only a DELIVERED record has a grant to revoke (``StateConflict`` otherwise,
    ``NotFound`` for no record). See the module docstring for the two steps.
    """
    book = RevocationBook(pipeline.store)
    for _ in range(MAX_ROUNDS):
        record = await pipeline.store.get_challenge(challenge_id)
        if record is None:
            raise NotFound(f"no challenge {challenge_id}")
        if record.state is not State.DELIVERED:
            raise StateConflict(
                f"challenge {challenge_id} is {record.state.value}; only a delivered grant "
                "can be revoked"
            )
        if record.top_up_of is not None:
            raise StateConflict(
                f"challenge {challenge_id} topped up grant {record.top_up_of}: revoke that grant"
            )
        now = pipeline.clock()
        await book.add(challenge_id, token_lifetime_end(record, now), now)
        if record.revoked_at is not None:
            return record, False
        result = await pipeline.transition(_revoking(record, now, reason))
        if isinstance(result, TransitionApplied):
            pipeline.tally.add(f"revoked:{record.plan_id}")
            return result.record, True
        if isinstance(result, StateMismatch) and result.record is None:
            raise NotFound(f"no challenge {challenge_id}")
        # Lost to a concurrent revocation (or delivery-side write): look again.
    raise StoreUnavailable("the grant kept changing; retry", retry_after=1)


def _revoking(record: ChallengeRecord, at: float, reason: str) -> TransitionRequest:
    """DELIVERED -> DELIVERED with ``revoked_at``, on the record's attempt (one line, once)."""
    payment = record.payment
    changes = RecordChanges(revoked_at=at)
    if payment is not None:
        changes = replace(changes, payment=replace(payment, attempt_id=uuid4_hex()))
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.DELIVERED,
        to=State.DELIVERED,
        at=at,
        reason=f"revoked: {reason}"[:200],
        changes=changes,
        attempt_id=payment.attempt_id if payment is not None else None,
    )


class _Refresh:
    """When to read a list again: ``refresh_seconds`` after the last read (or failure)."""

    def __init__(self, refresh_seconds: float, clock: Callable[[], float]) -> None:
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.revoked: dict[str, float] = {}
        self.fetched_at: float | None = None  # the last successful read
        self.tried_at: float | None = None  # the last read, successful or not

    def due(self) -> bool:
        return self.tried_at is None or self.clock() - self.tried_at >= self.refresh_seconds

    def hit(self, challenge_id: str, now: float) -> bool:
        until = self.revoked.get(challenge_id)
        return until is not None and until > now


class StoreRevocations:
    """A ``RevocationSource`` on the store (x402srv's own gateway): see the module docstring."""

    def __init__(
        self,
        store: Store,
        *,
        refresh_seconds: float,
        clock: Clock = system_clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.book = RevocationBook(store)
        self.clock = clock
        self._state = _Refresh(refresh_seconds, monotonic)
        self._reading: asyncio.Future[None] | None = None
        self._warned_at = -math.inf

    def __repr__(self) -> str:
        return f"StoreRevocations(refresh_seconds={self._state.refresh_seconds})"

    async def is_revoked(self, challenge_id: str) -> bool:
        if self._state.due():
            await self.refresh()
        return self._state.hit(challenge_id, self.clock())

    async def revoked(self) -> dict[str, float]:
        """The list as this process holds it now (read again first when due)."""
        if self._state.due():
            await self.refresh()
        now = self.clock()
        return {k: v for k, v in self._state.revoked.items() if v > now}

    async def refresh(self) -> None:
        """Read the list now; concurrent callers share one read."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read())
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        state = self._state
        state.tried_at = state.clock()
        try:
            state.revoked = await self.book.active(self.clock())
        except StoreUnavailable:
            if state.tried_at - self._warned_at >= 60:
                self._warned_at = state.tried_at
                log.warning("revocations: the store is unavailable; using the last list read")
            return
        state.fetched_at = state.tried_at


class RevocationList:
    """A ``RevocationSource`` (and sync one) on x402srv's published list, over HTTP.

    ``url`` is ``<agent_url>/.well-known/x402srv-revocations.json`` (see
    ``for_config``); https, or http to a loopback address only (as
    ``JWKSKeySource``; ``allow_http`` for a private network). The list is
    read again at most ``refresh_seconds`` after the last read; a revoked
    grant is refused within ``refresh_seconds`` plus about a second (x402srv
    serves the list from a copy at most a second old).
    """

    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: float = 5.0,
        max_stale_seconds: float | None = None,
        timeout: float = 5.0,
        allow_http: bool = False,
        clock: Clock = system_clock,
        monotonic: Callable[[], float] = time.monotonic,
        client: httpx.AsyncClient | None = None,
        sync_client: httpx.Client | None = None,
    ) -> None:
        self.url = checked_url(url, allow_http, "the revocation list URL")
        self.max_stale_seconds = max_stale_seconds
        self.timeout = timeout
        self.clock = clock
        self._state = _Refresh(refresh_seconds, monotonic)
        self._client = client
        self._sync_client = sync_client
        self._reading: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._warned_at = -math.inf

    def __repr__(self) -> str:
        return f"RevocationList({self.url!r})"

    @classmethod
    def for_config(cls, config: Config, **kwargs: Any) -> RevocationList:
        """The list the x402srv of ``config`` publishes at its ``agent_url``."""
        kwargs.setdefault("refresh_seconds", config.revocation.refresh_seconds)
        return cls(f"{config.seller.agent_url}{LIST_PATH}", **kwargs)

    async def is_revoked(self, challenge_id: str) -> bool:
        if self._state.due():
            if self._reading is None or self._reading.done():
                self._reading = asyncio.ensure_future(self._fetch())
            await asyncio.shield(self._reading)
        return self._answer(challenge_id)

    def is_revoked_sync(self, challenge_id: str) -> bool:
        with self._lock:
            if self._state.due():
                self._take(self._fetch_sync)
        return self._answer(challenge_id)

    def _answer(self, challenge_id: str) -> bool:
        state = self._state
        limit = self.max_stale_seconds
        if limit is not None and (
            state.fetched_at is None or state.clock() - state.fetched_at > limit
        ):
            raise RevocationsUnavailable(
                "the seller's revocation list could not be fetched; retry later",
                retry_after=max(1, math.ceil(state.refresh_seconds)),
            )
        return state.hit(challenge_id, self.clock())

    async def _fetch(self) -> None:
        async def get() -> httpx.Response:
            if self._client is not None:
                return await self._client.get(self.url, timeout=self.timeout)
            async with httpx.AsyncClient() as client:
                return await client.get(self.url, timeout=self.timeout)

        self._state.tried_at = self._state.clock()
        try:
            response = await get()
        except httpx.HTTPError as exc:
            self._failed(type(exc).__name__)
            return
        self._use(response)

    def _fetch_sync(self) -> httpx.Response:
        if self._sync_client is not None:
            return self._sync_client.get(self.url, timeout=self.timeout)
        with httpx.Client() as client:
            return client.get(self.url, timeout=self.timeout)

    def _take(self, fetch: Callable[[], httpx.Response]) -> None:
        self._state.tried_at = self._state.clock()
        try:
            response = fetch()
        except httpx.HTTPError as exc:
            self._failed(type(exc).__name__)
            return
        self._use(response)

    def _use(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            self._failed(f"HTTP {response.status_code}")
            return
        try:
            revoked = _parse_list(response.json())
        except ValueError:
            self._failed("not a revocation list")
            return
        self._state.revoked = revoked
        self._state.fetched_at = self._state.tried_at

    def _failed(self, why: str) -> None:
        now = self._state.clock()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning("revocations: fetching %s failed (%s); using the last list", self.url, why)


def _parse_list(document: Any) -> dict[str, float]:
    if not isinstance(document, dict) or not isinstance(document.get("revoked"), list):
        raise ValueError("not a revocation list")
    revoked: dict[str, float] = {}
    for entry in document["revoked"]:
        if not isinstance(entry, dict):
            raise ValueError("not a revocation list")
        jti, until = entry.get("jti"), entry.get("until")
        if (
            not isinstance(jti, str)
            or isinstance(until, bool)
            or not isinstance(until, int | float)
        ):
            raise ValueError("not a revocation list")
        revoked[jti] = float(until)
    return revoked


def published(revoked: Mapping[str, float], refresh_seconds: float, now: float) -> dict[str, Any]:
    """The body of ``LIST_PATH``: every live revocation, and how often to read it again."""
    return {
        "revoked": [{"jti": jti, "until": until} for jti, until in sorted(revoked.items())],
        "refreshSeconds": refresh_seconds,
        "generatedAt": now,
    }
