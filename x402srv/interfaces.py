"""What plugins implement: stores, settlers and credential issuers.

The pipeline only talks to these protocols. Every method is async; plugins
open their clients in ``start`` (called from Sanic's
``before_server_start``) and close them in ``close``.

Stores change records only through compare-and-set transitions whose side
effects (payment claims, txHash ownership) happen in the same atomic step; see
``TransitionRequest``. ``x402srv.testing.store_contract`` is the one test-suite
every store runs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from x402srv.access.records import ChallengeRecord, PaymentKey, RecordChanges, State
from x402srv.wire.networks import NetworkInfo

__all__ = [
    "Authorization",
    "Clock",
    "CredentialIssuer",
    "CreditAccount",
    "CreditEntry",
    "CreditStore",
    "Credited",
    "ExportItem",
    "ExportedChallenge",
    "ExportedLease",
    "ExportedTask",
    "GrantRequest",
    "IssuedCredential",
    "Lease",
    "LeaseTakeoverStore",
    "MigratingStore",
    "PaymentClaimed",
    "PortableStore",
    "RateWindow",
    "Rejected",
    "Settled",
    "SettlementHooks",
    "SettlementOutcome",
    "SettlementRequest",
    "Settler",
    "Spend",
    "SpendOutcome",
    "StateMismatch",
    "Store",
    "TransitionApplied",
    "TransitionRequest",
    "TransitionResult",
    "TxClaimed",
    "Unknown",
    "UsageBucket",
    "UsageStore",
    "UsedCall",
    "keeps_credits",
    "keeps_used_calls",
    "system_clock",
]

#: Seconds since the epoch. Injected everywhere so tests freeze time instead of sleeping.
Clock = Callable[[], float]


def system_clock() -> float:
    return time.time()


# ---------------------------------------------------------------- stores


@dataclass(frozen=True, slots=True)
class TransitionRequest:
    """A compare-and-set move of one record, with its atomic side effects.

    The store applies it only if the record is in ``expect`` (and, when
    ``attempt_id`` is given, the SETTLING attempt is still that one). In the same
    atomic step it may claim the payment key, release it, or claim a txHash.
    """

    challenge_id: str
    expect: State
    to: State
    at: float
    reason: str
    changes: RecordChanges = field(default_factory=RecordChanges)
    attempt_id: str | None = None
    claim_payment: PaymentKey | None = None
    release_payment: bool = False
    claim_tx_hash: str | None = None


@dataclass(frozen=True, slots=True)
class TransitionApplied:
    record: ChallengeRecord


@dataclass(frozen=True, slots=True)
class StateMismatch:
    """The record was not in the expected state (or attempt); ``record`` is how it is now."""

    record: ChallengeRecord | None


@dataclass(frozen=True, slots=True)
class PaymentClaimed:
    """The payment key already belongs to another challenge."""

    owner: str


@dataclass(frozen=True, slots=True)
class TxClaimed:
    """The txHash already belongs to another challenge."""

    owner: str


TransitionResult = TransitionApplied | StateMismatch | PaymentClaimed | TxClaimed


@dataclass(frozen=True, slots=True)
class Lease:
    """A named lock with an expiry and a fencing value.

    ``fence`` grows with every acquisition, so a holder whose lease ran out
    cannot overwrite what a later holder wrote. ``value`` is what the previous
    holder left on release (the gas wallet keeps its next nonce there).
    """

    name: str
    holder: str
    fence: int
    expires_at: float
    value: str | None = None


@runtime_checkable
class Store(Protocol):
    """Durable challenge records, payment claims, txHash ownership and leases."""

    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise ``StoreUnavailable`` when the backing service cannot be reached."""

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        """Insert ``record`` unless its requestId exists; return (stored record, created).

        With ``claim_payment`` the insert and the claim happen together or not at
        all (discovery-first purchases create their challenge already SETTLING).
        """

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None: ...

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None: ...

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        """The challenge that currently owns this payment claim, if any."""

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        """The challenge that owns this txHash claim (case-insensitive), if any."""

    async def transition(self, request: TransitionRequest) -> TransitionResult: ...

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        """Records in ``(updated_at, challenge_id)`` order, oldest first.

        ``after`` is a cursor: only records strictly after that position are
        listed, so a caller pages with the last record's ``(updated_at,
        challenge_id)`` and never reads the same page twice, however many
        records it leaves as they are (the reconciler, operators).
        """

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        """Delete up to ``limit`` records in ``states`` last updated before the time.

        A record goes together with its requestId index, payment claim and txHash
        claim, atomically per record. Returns how many records were deleted.
        """

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        """Store an A2A task as a JSON document, compare-and-set on its version.

        ``expect_version=None`` creates it only if absent; otherwise it replaces the
        document only if the stored version equals ``expect_version``. Returns the
        new version (1 on creation), or None when the condition failed.
        ``prune_after`` is the time after which ``prune_tasks`` may delete the task
        (each save sets it anew; ``None``: never).
        """

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        """The stored task document and its version."""

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` tasks whose ``prune_after`` is earlier than ``before``."""

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        """Add ``hits`` to shared per-key counters; return each key's total after the add.

        The caller names one key per client and time window; a counter lives
        until ``window_end`` and the store may forget any counter whose
        ``window_end`` is before ``now``. Atomic per key across every process
        that shares the store (the unpaid-request limit, ``RATE_LIMITED``).
        """

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        """Take the named lease if it is free or expired; ``None`` when someone holds it."""

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        """Release and leave ``value`` for the next holder; False if the lease was lost."""

    async def find_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        payer: str | None = None,
        before: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        """Records newest first, in ``(updated_at, challenge_id)`` order (the seller's console).

        ``payer`` keeps the records whose payer (``payer_of`` in ``x402srv.plugin``: the
        settled payer, else the payer of the payment being settled) is that
        address, compared in lowercase, through an index of its own: a payer's
        purchases are found without reading anyone else's. ``before`` is a
        cursor: only records strictly before that position are listed, so a
        caller pages back in time with the last record's ``(updated_at,
        challenge_id)``.
        """

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        """Add each delta to the counter ``name`` of the time bucket ``bucket`` (the counters).

        Keys are ``(bucket, name)``: the bucket is the caller's (the start of an
        hour, in seconds since the epoch) and names come from a bounded set, so
        the store holds a bounded number of counters per bucket however much
        traffic there is: a flood of unpaid requests moves counters, not rows.
        Atomic per counter across every process that shares the store. The
        store may forget every counter of a bucket before ``forget_before``.
        """

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        """Every counter whose bucket is in ``[start, end)``; never a scan of the records."""


@runtime_checkable
class MigratingStore(Protocol):
    """A store whose schema only ``x402srv migrate`` changes (optional, beside ``Store``).

    A store shared by several instances cannot upgrade its own schema when it
    starts: one instance would change tables under the others. Such a store
    implements ``migrate``, and its ``start`` refuses (``ConfigError`` naming
    ``x402srv migrate``) a schema older than it needs. Stores that keep their
    own schema (sqlite upgrades its file when it opens it; Redis has none) do
    not implement it, and ``x402srv migrate`` says there is nothing to do.
    """

    async def migrate(self) -> list[str]:
        """Bring the schema to the version this code needs, without ``start()``.

        Safe to run while old instances serve (each step keeps what they use)
        and by two operators at once (steps are serialized). Returns one line
        per step applied; an empty list when the schema was already current.
        """


@runtime_checkable
class LeaseTakeoverStore(Protocol):
    """A store that hands a held lease to a new holder at once (optional, beside ``Store``).

    ``acquire_lease`` waits out a held lease's TTL, whatever became of its
    holder. A caller that knows the holder is gone (the gas wallet sees that the
    process holding its nonce lease on this host has died) reads the lease with
    ``held_lease`` and takes it with ``take_over_lease``, a compare-and-set on
    holder and fence: of any number of callers taking over one lease, one wins.
    A store without these methods still serves: its leases pass to a new holder
    only once they expire. The built-in stores and the redis and postgres
    plugins implement it, and ``x402srv.testing.StoreContract`` checks it.
    """

    async def held_lease(self, name: str, now: float) -> Lease | None:
        """The lease as its holder has it (holder, fence, expiry, value left before).

        ``None`` when nobody holds it at ``now``: never taken, released or expired
        (``acquire_lease`` would take it).
        """

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
        """Give the lease to ``holder`` until ``now + ttl`` if it is still ``held``.

        One atomic step, only while the lease has ``held.holder`` and
        ``held.fence`` and was not released: then, as ``acquire_lease`` does, the
        fence grows by one and the value left stays. ``None`` (nothing changes)
        when the lease moved since it was read: released, taken after it
        expired, or taken over by another caller.
        """


# ---------------------------------------------------------------- credits (metering)


@dataclass(frozen=True, slots=True)
class RateWindow:
    """At most ``limit`` calls per fixed window of ``seconds``; windows start at multiples of it."""

    limit: int
    seconds: int


@dataclass(frozen=True, slots=True)
class CreditEntry:
    """Credits added to a grant once: its purchase or a top-up (``key``: the paying challenge)."""

    key: str
    amount: int
    at: float


@dataclass(frozen=True, slots=True)
class UsageBucket:
    """Calls and credits of one hour (``start``: a multiple of 3600) of a grant's history."""

    start: int
    calls: int
    spent: int
    refunded: int


@dataclass(frozen=True, slots=True)
class UsedCall:
    """One call charged by use, as settled: when, on which route or tool, held and charged.

    ``route`` is a gateway route's prefix (``/v1/complete``) or an MCP tool as
    ``<path>:<tool>`` (``/mcp:search``); ``charged`` is at most ``reserved``.
    """

    at: float
    route: str
    reserved: int
    charged: int


@dataclass(frozen=True, slots=True)
class CreditAccount:
    """What a store keeps per grant (``grant_id``: the purchase's challengeId, the token's jti).

    ``balance`` is what is left to spend; ``credited``, ``spent`` and
    ``refunded`` add up to it (``credited - spent + refunded``). ``calls``
    counts the calls that went through. ``window_end`` and ``window_calls``
    are the rate window that is counting. ``entries`` lists every credit by
    key (oldest first), ``usage`` the most recent hours, newest first, at most
    ``USAGE_BUCKETS`` of them, ``used_calls`` the most recent calls charged by
    use (``UsageStore.settle``), newest first, at most ``USED_CALLS``. The store
    may forget the account once
    ``keep_until`` has passed; every operation treats it as absent from then on.
    """

    grant_id: str
    balance: int
    credited: int
    spent: int
    refunded: int
    calls: int
    window_end: int
    window_calls: int
    keep_until: float
    entries: tuple[CreditEntry, ...] = ()
    usage: tuple[UsageBucket, ...] = ()
    used_calls: tuple[UsedCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Credited:
    """The balance after ``credit``; ``applied`` is False when the key was credited before."""

    balance: int
    applied: bool


class SpendOutcome(StrEnum):
    SPENT = "spent"
    NO_CREDITS = "no-credits"  # the balance is less than the cost (or there is no account)
    THROTTLED = "throttled"  # the rate window is full: nothing was spent or counted


@dataclass(frozen=True, slots=True)
class Spend:
    """What one ``spend`` decided, with what the buyer's ``RateLimit`` fields report.

    ``balance`` is the balance after the call (``None`` for a spend that meters
    no credits); ``window_calls`` the calls counted in the window ending at
    ``window_end`` (both 0 without a rate window).
    """

    outcome: SpendOutcome
    balance: int | None
    window_calls: int
    window_end: int


@runtime_checkable
class CreditStore(Store, Protocol):
    """A store that also keeps credits and rate windows per grant (``calls``, ``rate_limit``).

    An optional capability: a store without these methods still serves every
    plan sold by time, and the registry refuses it (``ConfigError``) for a config
    that meters calls. Each method is one atomic step across every process that
    shares the store; ``x402srv.testing.StoreContract`` checks them on every
    store that has them.
    """

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        """Add ``amount`` credits once per ``key`` (creating the account if absent).

        A key credited before changes nothing and answers ``applied=False``:
        a purchase or top-up delivered again after a crash never credits twice.
        ``keep_until`` only ever moves the account's ``keep_until`` later.
        """

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
        """One call: check the rate window, then take ``cost`` credits, all or nothing.

        THROTTLED when ``rate`` allows no further call in the window of ``now``
        (nothing is counted or spent); else NO_CREDITS when ``credits`` and the
        balance is below ``cost`` (nothing changes); else SPENT: the balance
        drops by ``cost`` (only with ``credits``), the call counts in the window
        and in the hour's usage. Without ``credits`` a missing account is
        created (rate limits of plans sold by time).
        """

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        """Give back ``amount`` credits of a call that failed; the balance, or None (no account)."""

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        """The grant's account with its entries and usage; None if absent (or already forgotten)."""


@runtime_checkable
class UsageStore(CreditStore, Protocol):
    """A credit store that also settles calls charged by use and keeps a record of each.

    An optional capability beside ``CreditStore`` (every built-in store has it):
    without it a call charged by use is settled with ``refund`` and only logged,
    and ``challenges show`` and the console list no calls.
    """

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        """Give back ``release`` (0 or more) of a call's reservation and record ``call``.

        One atomic step: the balance grows by ``release`` (counted as refunded,
        in the hour's usage too) and ``call`` goes first in ``used_calls``, of
        which the store keeps the newest ``USED_CALLS``. The balance after, or
        None (nothing changes) when there is no live account.
        """


def keeps_used_calls(store: object) -> bool:
    """Whether ``store`` settles calls charged by use (``UsageStore``), a wrapper's inner too."""
    inner = getattr(store, "keeps_used_calls", None)
    if isinstance(inner, bool):
        return inner
    return isinstance(store, UsageStore)


def keeps_credits(store: object) -> bool:
    """Whether ``store`` can meter calls: every ``CreditStore`` method (a wrapper's inner too).

    A wrapper (``x402srv.plugin.DelegatingStore``) answers with a ``keeps_credits``
    property of its own: it has the methods whether or not the store inside does.
    """
    inner = getattr(store, "keeps_credits", None)
    if isinstance(inner, bool):
        return inner
    return isinstance(store, CreditStore)


# ---------------------------------------------------------------- moving between stores


@dataclass(frozen=True, slots=True)
class ExportedChallenge:
    """A record with the claims it owns, as stored: ``str(PaymentKey)``, lowercase txHashes."""

    record: ChallengeRecord
    payment_claims: tuple[str, ...] = ()
    tx_claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExportedTask:
    """An A2A task document with its compare-and-set version and prune time."""

    task_id: str
    document: dict[str, Any]
    version: int
    prune_after: float | None = None


@dataclass(frozen=True, slots=True)
class ExportedLease:
    """A lease's fence and the value its last holder left (the holder itself is not moved)."""

    name: str
    fence: int
    value: str | None = None


#: One thing a store holds, as ``export_items`` yields it (a credit account with its entries).
ExportItem = ExportedChallenge | ExportedTask | CreditAccount | ExportedLease


@runtime_checkable
class PortableStore(Protocol):
    """A store whose whole content can move to another store (optional, beside ``Store``).

    ``x402srv export`` writes what ``export_items`` yields as JSON lines;
    ``x402srv import`` hands the items to another store's ``import_items``, in
    batches, after checking that it holds no challenge, task or credit account.
    The built-in stores and the redis and postgres plugins implement it, and
    ``x402srv.testing.StoreContract`` checks that a store's export, imported
    into a fresh store of the same kind, exports the same again.
    """

    def export_items(self) -> AsyncIterator[ExportItem]:
        """Everything held: challenges (each with the claims it owns) first, then tasks,
        credit accounts (with entries and usage), then leases; in no particular order within
        a kind. Hit counters are not exported (they only count a window)."""

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        """Write ``items`` as they were exported: records with their history, claims,
        task versions, credit accounts (accounts past ``keep_until`` at ``now`` are skipped:
        they are absent anyway). A challenge, request id, claim, task or account that exists
        already raises ``ValueError`` and nothing of the batch is written. A lease that
        exists keeps its holder and value; its fence becomes at least the exported one, so
        fences never go back."""


# ---------------------------------------------------------------- settlement


@dataclass(frozen=True, slots=True)
class Authorization:
    """A parsed EIP-3009 ``transferWithAuthorization`` (already checked by the pipeline)."""

    payer: str
    to: str
    value: int
    valid_after: int
    valid_before: int
    nonce: str
    signature: str


@dataclass(frozen=True, slots=True)
class SettlementRequest:
    """Everything a settler needs; ``payload`` and ``requirements`` are x402 v2 wire dicts."""

    challenge_id: str
    attempt_id: str
    authorization: Authorization
    payload: Mapping[str, Any]
    requirements: Mapping[str, Any]
    network: NetworkInfo
    #: The settler's own ``precheck`` found the transfer good a moment ago (the pipeline
    #: runs it while it records the hand-over): ``settle`` need not ask the token again.
    prechecked: bool = False
    #: The settler's own ``precheck`` raised a moment ago: it could not tell (its node
    #: did not answer, say). ``settle`` should check another way, not ask it again.
    precheck_failed: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """The transfer is on-chain (receipt checked): txHash and payer.

    ``payer`` is the settler's word; the core records the authorization's own
    signer (the pipeline checked the signature), never this. ``by`` names who
    settled it when a network has several settlers (``"facilitator https://...
    #2 on eip155:8453"``; never a secret), as the chain shows the transaction's
    sender: the log and the record's history say so.
    """

    tx_hash: str
    payer: str
    by: str | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """Definitely nothing moved on-chain; the buyer may pay again.

    ``settler_failed``: the settler itself could not settle (unreachable, a 5xx
    that broadcast nothing, the network unsupported), not the payment: a
    network with more settlers tries the next one at once, and when none of
    them could, the buyer gets 503 SETTLER_UNAVAILABLE (the payment is fine).
    """

    reason: str
    detail: str = "The payment could not be settled."
    settler_failed: bool = False


@dataclass(frozen=True, slots=True)
class Unknown:
    """The outcome is not known (timeout, dropped connection): resolve from the chain later."""

    reason: str
    tx_hash: str | None = None


SettlementOutcome = Settled | Rejected | Unknown


class SettlementHooks(Protocol):
    async def note_broadcast(self, tx_hash: str) -> None:
        """Persist a txHash as soon as it is broadcast, before waiting for the receipt."""

    async def note(self, reason: str) -> None:
        """Add a line to the record's history (what a settler tried; no secret in it)."""


@runtime_checkable
class Settler(Protocol):
    """Moves the buyer's authorization on-chain. Must not raise: exceptions count as Unknown."""

    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def settle(
        self, request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome: ...


# ---------------------------------------------------------------- credentials


@dataclass(frozen=True, slots=True)
class GrantRequest:
    """What an issuer learns about a paid challenge (docs/protocol/flow.md, step 10)."""

    request_id: str
    challenge_id: str
    plan_id: str
    resource_id: str
    tx_hash: str
    payer: str
    token_ttl_seconds: int


@dataclass(frozen=True, slots=True)
class IssuedCredential:
    token: str
    token_type: str
    expires_at: float


@runtime_checkable
class CredentialIssuer(Protocol):
    """Turns a paid challenge into a credential.

    An issuer may set ``exclusive = False`` when issuing twice is harmless (a
    local signature, as ``jwt``): the pipeline then skips the delivery claim.
    Without it (the default, and ``callback``: the seller's function may create
    an account or a key) one request at a time calls ``issue`` per challenge.
    """

    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def issue(self, request: GrantRequest) -> IssuedCredential: ...

    def jwks(self) -> dict[str, Any] | None:
        """Public keys to serve at /.well-known/jwks.json, or None when there are none."""
