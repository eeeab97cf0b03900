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

Neither fails open (docs/console.md, "Revoking a grant"):

- a verifier that has never read a list cannot tell a revoked token from a
  good one, so it answers every token 503 ``REVOCATIONS_UNAVAILABLE`` (the
  token may well be fine: a 401 would send the buyer to pay again) until one
  read succeeds;
- the published list answers 503 ``STORE_UNAVAILABLE`` until its worker has
  read the store once, and says when that read was (``readAt``), so a list
  served from an old copy during an outage is not taken for a fresh one;
- a verifier never forgets an entry it has read before the entry's time is
  over: a later list without it (an x402srv of an older version, a store
  restored from an old backup) adds, it does not replace.

Each worker reads the list once before it accepts a connection
(``StoreRevocations.prime``), so its first requests do not all wait on, or
fail with, one read under load; while no read has succeeded yet (the store
was down at start-up) the next read is tried within ``NEVER_READ_RETRY_SECONDS``
instead of ``refresh_seconds``, so a worker refuses tokens no longer than it must.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

import httpx

from x402srv.access.ids import uuid4_hex
from x402srv.access.records import ChallengeRecord, RecordChanges, State
from x402srv.errors import NotFound, RevocationsUnavailable, StateConflict, StoreUnavailable
from x402srv.interfaces import (
    Clock,
    StateMismatch,
    Store,
    TransitionApplied,
    TransitionRequest,
    system_clock,
)
from x402srv.tokens.jwks import checked_url

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline
    from x402srv.config.models import Config

__all__ = [
    "DOCUMENT_ID",
    "LIST_PATH",
    "Freshness",
    "ListCopy",
    "RevocationBook",
    "RevocationList",
    "StoreRevocations",
    "revoke_grant",
    "token_lifetime_end",
]

log = logging.getLogger("x402srv.tokens.revocation")

#: The store document that holds the list (no A2A task id can be this: those are UUIDs).
DOCUMENT_ID: Final = "x402srv.revocations"
#: Where x402srv publishes the list for verifiers that cannot read its store.
LIST_PATH: Final = "/.well-known/x402srv-revocations.json"
#: Verifiers may accept a token this long past its ``exp`` (their clock leeway, at most).
LEEWAY_SECONDS: Final = 300
#: Rounds of read-modify-write one change of the list may lose before giving up.
MAX_ROUNDS: Final = 32
#: While no list was ever read, how soon a failed read is tried again (every token waits on it).
NEVER_READ_RETRY_SECONDS: Final = 0.5


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
    pipeline: AccessPipeline,
    challenge_id: str,
    *,
    reason: str = "revoked by the seller",
    mark: Callable[[ChallengeRecord], str | None] | None = None,
) -> tuple[ChallengeRecord, bool]:
    """Revoke the grant of ``challenge_id``; (the record, whether this call revoked it).

    Only a DELIVERED record has a grant to revoke (``StateConflict`` otherwise,
    ``NotFound`` for no record). See the module docstring for the two steps.
    ``mark(record)``, when given and not None, goes before ``reason`` in the
    history line (``x402srv.refunds.running.revoke`` marks the revocations whose
    unused credits it refunds).
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
        marked = mark(record) if mark is not None else None
        said = reason if marked is None else f"{marked}; {reason}"
        result = await pipeline.transition(_revoking(record, now, said))
        if isinstance(result, TransitionApplied):
            pipeline.counters.add(f"revoked:{record.plan_id}")
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


@dataclass(frozen=True)
class Freshness:
    """How current a verifier's copy of the revocation list is (for health checks, metrics).

    A verifier answers every token 503 while ``read`` is false; ``age_seconds``
    grows while reads fail (the list held stays in use, see the module docstring).
    """

    #: Whether a list was ever read. Until then every token is refused.
    read: bool
    #: Seconds since the store read behind the list held (None: never read).
    age_seconds: float | None
    #: When that store read was, Unix seconds (the published list's ``readAt``).
    read_at: float | None
    #: Why the last attempt to read failed; None when it succeeded.
    last_error: str | None


@dataclass(frozen=True)
class ListCopy:
    """The live entries of the list, and when they were read from the store (Unix seconds)."""

    revoked: dict[str, float]
    read_at: float


class _Refresh:
    """One verifier's copy of the list, and when to read it again.

    ``refresh_seconds`` after the last attempt (successful or not). Times
    named ``*_at`` without "wall" are on the ``monotonic`` clock.
    """

    def __init__(self, refresh_seconds: float, clock: Callable[[], float]) -> None:
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.revoked: dict[str, float] = {}
        self.fetched_at: float | None = None  # the store read behind the list held
        self.read_at_wall: float | None = None  # the same read, Unix seconds
        self.tried_at: float | None = None  # the last read, successful or not
        self.last_error: str | None = None

    def due(self) -> bool:
        if self.tried_at is None:
            return True
        wait = self.refresh_seconds
        if self.fetched_at is None:  # never read: every token is refused until a read succeeds
            wait = min(wait, NEVER_READ_RETRY_SECONDS)
        return self.clock() - self.tried_at >= wait

    def hit(self, challenge_id: str, now: float) -> bool:
        until = self.revoked.get(challenge_id)
        return until is not None and until > now

    def take(
        self, revoked: Mapping[str, float], fetched_at: float, read_at: float, now: float
    ) -> None:
        """A list read: its entries join the live ones held (never shortened, never dropped)."""
        kept = {k: v for k, v in self.revoked.items() if v > now}
        for challenge_id, until in revoked.items():
            kept[challenge_id] = max(until, kept.get(challenge_id, until))
        self.revoked = kept
        if self.fetched_at is None or fetched_at >= self.fetched_at:
            self.fetched_at, self.read_at_wall = fetched_at, read_at
        self.last_error = None

    def require_read(self, what: str) -> None:
        """``RevocationsUnavailable`` while no list was ever read: refusing is all that is safe."""
        if self.fetched_at is None:
            raise RevocationsUnavailable(
                f"{what} has not been read yet, so no token can be checked; retry later",
                retry_after=self.retry_after(),
            )

    def meanwhile(self) -> str:
        """What the verifier does while its reads fail (for the warning it logs)."""
        if self.fetched_at is None:
            return "refusing every token until a list is read"
        return "using the last list read"

    def retry_after(self) -> int:
        return max(1, math.ceil(self.refresh_seconds))

    def freshness(self) -> Freshness:
        fetched_at = self.fetched_at
        return Freshness(
            read=fetched_at is not None,
            age_seconds=None if fetched_at is None else max(0.0, self.clock() - fetched_at),
            read_at=self.read_at_wall,
            last_error=self.last_error,
        )


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
        """Whether it is listed; ``RevocationsUnavailable`` while the store was never read."""
        if self._state.due():
            await self.refresh()
        self._state.require_read("the revocation list (the store is unavailable)")
        return self._state.hit(challenge_id, self.clock())

    async def current(self) -> ListCopy:
        """The list as this process holds it now (read again first when due).

        ``StoreUnavailable`` while no read of the store has succeeded: an empty
        list would tell every verifier that polls it to forget what it knew.
        """
        state = self._state
        if state.due():
            await self.refresh()
        if state.read_at_wall is None:
            raise StoreUnavailable(
                "the revocation list has not been read from the store yet; retry",
                retry_after=state.retry_after(),
            )
        now = self.clock()
        revoked = {k: v for k, v in state.revoked.items() if v > now}
        return ListCopy(revoked, state.read_at_wall)

    def freshness(self) -> Freshness:
        """How old the list this process holds is (its reads fail while the store is down)."""
        return self._state.freshness()

    async def prime(self) -> bool:
        """Read the list before serving (a worker's start-up); whether the read succeeded.

        A failure is logged and leaves the verifier refusing tokens, as before
        any read: starting during a store outage must not fail open.
        """
        await self.refresh()
        return self._state.fetched_at is not None

    async def refresh(self) -> None:
        """Read the list now; concurrent callers share one read."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read())
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        state = self._state
        state.tried_at = state.clock()
        read_at = self.clock()  # entries revoked after this may be missing from the read
        try:
            revoked = await self.book.active(read_at)
        except StoreUnavailable:
            state.last_error = "the store is unavailable"
            if state.tried_at - self._warned_at >= 60:
                self._warned_at = state.tried_at
                log.warning("revocations: the store is unavailable; %s", state.meanwhile())
            return
        state.take(revoked, state.tried_at, read_at, self.clock())


class RevocationList:
    """A ``RevocationSource`` (and sync one) on x402srv's published list, over HTTP.

    ``url`` is ``<agent_url>/.well-known/x402srv-revocations.json`` (see
    ``for_config``); https, or http to a loopback address only (as
    ``JWKSKeySource``; ``allow_http`` for a private network). The list is
    read again at most ``refresh_seconds`` after the last read; a revoked
    grant is refused within ``refresh_seconds`` plus about a second (x402srv
    serves the list from a copy at most a second old).

    Until a list was read, every token is answered 503
    ``REVOCATIONS_UNAVAILABLE``; afterwards a failed read (the publisher
    unreachable, or answering 503 because it cannot read its store) keeps the
    list held, and ``freshness()`` says how old it is. Its age counts from the
    publisher's store read (``readAt``), not from the fetch, so a list an
    x402srv keeps serving from an old copy during an outage ages too, and
    ``max_stale_seconds`` applies to it.
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
        """Whether it is listed; ``RevocationsUnavailable`` while no list was read (or too old)."""
        if self._state.due():
            if self._reading is None or self._reading.done():
                self._reading = asyncio.ensure_future(self._fetch())
            await asyncio.shield(self._reading)
        return self._answer(challenge_id)

    def is_revoked_sync(self, challenge_id: str) -> bool:
        """As ``is_revoked``, blocking."""
        with self._lock:
            if self._state.due():
                self._take(self._fetch_sync)
        return self._answer(challenge_id)

    def freshness(self) -> Freshness:
        """How old the list held is, and whether the last fetch failed (it is still used)."""
        return self._state.freshness()

    def _answer(self, challenge_id: str) -> bool:
        state = self._state
        state.require_read("the seller's revocation list")
        limit = self.max_stale_seconds
        fetched_at = state.fetched_at
        if limit is not None and fetched_at is not None and state.clock() - fetched_at > limit:
            raise RevocationsUnavailable(
                "the seller's revocation list could not be fetched; retry later",
                retry_after=state.retry_after(),
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
        if response.status_code != 200:  # a 503: the publisher has not read its store yet
            self._failed(f"HTTP {response.status_code}")
            return
        try:
            document = response.json()
            revoked = _parse_list(document)
        except ValueError:
            self._failed("not a revocation list")
            return
        state = self._state
        assert state.tried_at is not None  # (set before every fetch)
        age = _age_at_publisher(document)
        read_at = _number(document.get("readAt"))
        if read_at is None:  # an x402srv from before readAt was published
            read_at = self.clock() - age
        state.take(revoked, state.tried_at - age, read_at, self.clock())

    def _failed(self, why: str) -> None:
        state = self._state
        state.last_error = why
        now = state.clock()
        if now - self._warned_at >= 60:
            self._warned_at = now
            log.warning(
                "revocations: fetching %s failed (%s); %s", self.url, why, state.meanwhile()
            )


def _number(value: Any) -> float | None:
    """A JSON number (not a boolean, not infinite) as a float; None for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _age_at_publisher(document: dict[str, Any]) -> float:
    """How old the list was when served: ``generatedAt - readAt``, both the publisher's clock.

    A difference of two readings of one clock, so the verifier's clock may
    disagree with the publisher's by any amount; 0 when either is missing.
    """
    generated_at, read_at = _number(document.get("generatedAt")), _number(document.get("readAt"))
    if generated_at is None or read_at is None:
        return 0.0
    return max(0.0, generated_at - read_at)


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


def published(copy: ListCopy, refresh_seconds: float, now: float) -> dict[str, Any]:
    """The body of ``LIST_PATH``: every live revocation, and how often to read it again.

    ``generatedAt`` is when this answer was made, ``readAt`` when its list was
    read from the store: during a store outage the second stops moving.
    """
    return {
        "revoked": [{"jti": jti, "until": until} for jti, until in sorted(copy.revoked.items())],
        "refreshSeconds": refresh_seconds,
        "generatedAt": now,
        "readAt": copy.read_at,
    }
