"""The one module a plugin author imports: ``from x402srv.plugin import ...``.

A plugin is a distribution with an entry point in the ``x402srv`` group whose
module implements one or more registration hooks::

    from x402srv.plugin import BaseSettler, PluginContext, Register, Settled, Settler, hookimpl

    class Relayer(BaseSettler):
        name = "relayer"

        async def settle(self, request, hooks):
            ...
            return Settled(tx_hash, request.authorization.payer)

    @hookimpl
    def register_settlers(register: Register[Settler]) -> None:
        register("relayer", lambda ctx: Relayer())

Three kinds, one life cycle each: a factory ``(PluginContext) -> plugin`` is
called only when the TOML selects its name; the server then calls ``start()``
(open connections) and, at shutdown, ``close()``. What a factory returns is
checked against the kind's Protocol at start-up.

- **Stores** (``Store``): records, claims, leases, tasks and counters, each
  change atomic. Start from a real store and wrap it with ``DelegatingStore``,
  or implement the Protocol and run ``x402srv.testing.StoreContract``. A store
  that also keeps credits per grant (``CreditStore``: ``credit``, ``spend``,
  ``refund``, ``get_credits``) can serve plans that sell calls; the contract
  checks those methods whenever a store has them. A store that can hand a held
  lease to a new holder at once (``LeaseTakeoverStore``: ``held_lease``,
  ``take_over_lease``) lets the gas wallet take over the nonce lease of a
  process that died on its host instead of waiting for the lease's TTL.
- **Settlers** (``Settler``, ``BaseSettler``): move a checked authorization
  on-chain and say ``Settled``, ``Rejected`` (nothing moved) or ``Unknown``.
  The core confirms every ``Settled`` on-chain when an RPC is configured.
- **Credential issuers** (``CredentialIssuer``, ``BaseIssuer``): turn a paid
  challenge into a credential.

Helpers come with it: the chain reader and ``resolve_authorization`` (what the
chain says about an authorization), the EIP-3009 call and its revert judges
(``transfer_calldata``, ``preflight``, ``judge_revert``, ``from_chain``), the
store rules every built-in store decides by (``check_state``, ``claim_keys``,
``encode_record``, ``payer_of`` ...), secrets (``Secret``, the ``SecretValue`` option
type, ``redact_url``) and ``failpoint`` for crash tests. A store that only
``x402srv migrate`` may change the schema of implements ``MigratingStore``.
Everything in ``x402srv`` that this module (and ``x402srv.testing``, the test
kit) does not export is internal and may change between releases.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from x402srv.access.failpoints import failpoint
from x402srv.access.records import (
    ChallengeRecord,
    PaymentDetails,
    PaymentKey,
    RecordChanges,
    State,
    Transition,
)
from x402srv.config.fields import PluginOptions
from x402srv.config.models import Config
from x402srv.config.networks import SettlerConfig, SettlerSpec
from x402srv.config.secrets import Secret, SecretValue, redact_url
from x402srv.errors import ConfigError, StoreUnavailable, X402SrvError
from x402srv.hookspecs import Factory, Register, hookimpl
from x402srv.interfaces import (
    Authorization,
    Clock,
    CredentialIssuer,
    CreditAccount,
    Credited,
    CreditEntry,
    CreditStore,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    GrantRequest,
    IssuedCredential,
    Lease,
    LeaseTakeoverStore,
    MigratingStore,
    PaymentClaimed,
    PortableStore,
    RateWindow,
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Spend,
    SpendOutcome,
    StateMismatch,
    Store,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
    TxClaimed,
    Unknown,
    UsageBucket,
    UsageStore,
    UsedCall,
    keeps_credits,
    keeps_used_calls,
)
from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import (
    OverRefund,
    RefundCreated,
    RefundMismatch,
    RefundMoved,
    decide_create,
    decide_move,
    listed,
)
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader, ChainUnavailable, Receipt
from x402srv.settlement.transfer_call import (
    DETAILS,
    MalformedSignature,
    Revert,
    RevertKind,
    classify_revert,
    from_chain,
    judge_revert,
    preflight,
    transfer_calldata,
)
from x402srv.settlement.verdicts import (
    NotTransferred,
    Transferred,
    Undecided,
    Verdict,
    resolve_authorization,
)
from x402srv.stores.coalescing import Coalescer
from x402srv.stores.credit_rules import (
    USAGE_BUCKET_SECONDS,
    USAGE_BUCKETS,
    USED_CALLS,
    apply_credit,
    apply_refund,
    apply_settle,
    apply_spend,
    bucket_start,
    check_used_call,
    decode_account,
    encode_account,
    window_end,
)
from x402srv.stores.dump_rules import ImportBatch, sort_items
from x402srv.stores.rules import (
    check_state,
    claim_conflict,
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
from x402srv.wire.networks import NetworkInfo, Token
from x402srv.wire.reasons import Reason

__all__ = [
    "DETAILS",
    "USAGE_BUCKETS",
    "USAGE_BUCKET_SECONDS",
    "USED_CALLS",
    "Authorization",
    "BaseIssuer",
    "BaseSettler",
    "ChainReader",
    "ChainUnavailable",
    "ChallengeRecord",
    "Clock",
    "Coalescer",
    "Config",
    "ConfigError",
    "CredentialIssuer",
    "CreditAccount",
    "CreditEntry",
    "CreditStore",
    "Credited",
    "DelegatingStore",
    "ExportItem",
    "ExportedChallenge",
    "ExportedLease",
    "ExportedTask",
    "Factory",
    "GrantRequest",
    "ImportBatch",
    "IssuedCredential",
    "Lease",
    "LeaseTakeoverStore",
    "MalformedSignature",
    "MigratingStore",
    "NetworkInfo",
    "NotTransferred",
    "OverRefund",
    "PaymentClaimed",
    "PaymentDetails",
    "PaymentKey",
    "PluginContext",
    "PluginOptions",
    "PortableStore",
    "RateWindow",
    "Reason",
    "Receipt",
    "RecordChanges",
    "RefundCreated",
    "RefundMismatch",
    "RefundMove",
    "RefundMoved",
    "RefundRecord",
    "RefundState",
    "Register",
    "Rejected",
    "Revert",
    "RevertKind",
    "Secret",
    "SecretValue",
    "Settled",
    "SettlementHooks",
    "SettlementOutcome",
    "SettlementRequest",
    "Settler",
    "SettlerConfig",
    "SettlerSpec",
    "Spend",
    "SpendOutcome",
    "State",
    "StateMismatch",
    "Store",
    "StoreUnavailable",
    "Token",
    "Transferred",
    "Transition",
    "TransitionApplied",
    "TransitionRequest",
    "TransitionResult",
    "TxClaimed",
    "Undecided",
    "Unknown",
    "UsageBucket",
    "UsageStore",
    "UsedCall",
    "Verdict",
    "X402SrvError",
    "apply_credit",
    "apply_refund",
    "apply_settle",
    "apply_spend",
    "bucket_start",
    "check_state",
    "check_used_call",
    "claim_conflict",
    "claim_keys",
    "classify_revert",
    "decide_create",
    "decide_move",
    "decode_account",
    "decode_record",
    "decode_task",
    "encode_account",
    "encode_record",
    "encode_task",
    "failpoint",
    "from_chain",
    "hookimpl",
    "judge_revert",
    "keeps_credits",
    "keeps_used_calls",
    "key_to_release",
    "listed",
    "nameable",
    "payer_of",
    "preflight",
    "redact_url",
    "resolve_authorization",
    "sort_items",
    "state_values",
    "transfer_calldata",
    "tx_claim_key",
    "window_end",
]


class BaseSettler:
    """A settler with nothing to open or close: subclass it, set ``name``, write ``settle``.

    ``settle`` must not raise (an exception counts as ``Unknown``: it may have
    broadcast); it answers ``Rejected`` only when nothing can have moved.
    """

    name: str = ""

    async def start(self) -> None:
        """Open clients here (called once per worker, before the first request)."""

    async def close(self) -> None:
        """Close what ``start`` opened."""

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        raise NotImplementedError(f"{type(self).__name__}.settle")


class BaseIssuer:
    """An issuer with nothing to open or close: subclass it, set ``name``, write ``issue``.

    ``exclusive = True`` (the default) makes the core call ``issue`` at most
    once at a time per challenge; set it to False when issuing twice is harmless
    (a pure signature). ``jwks`` returns the public keys to publish, if any.
    """

    name: str = ""
    exclusive: bool = True

    async def start(self) -> None:
        """Open clients here (called once per worker, before the first request)."""

    async def close(self) -> None:
        """Close what ``start`` opened."""

    async def issue(self, request: GrantRequest) -> IssuedCredential:
        raise NotImplementedError(f"{type(self).__name__}.issue")

    def jwks(self) -> dict[str, Any] | None:
        return None


class DelegatingStore:
    """A ``Store`` that hands every call to ``inner``: override only what a wrapper changes.

    For stores that add something around a real one (an audit log, metrics,
    encryption at rest) without re-implementing its atomic operations.
    """

    def __init__(self, inner: Store, *, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or inner.name

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> None:
        await self.inner.ping()

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        return await self.inner.create_challenge(record, claim_payment=claim_payment)

    async def get_challenge(self, challenge_id: str) -> ChallengeRecord | None:
        return await self.inner.get_challenge(challenge_id)

    async def get_by_request_id(self, request_id: str) -> ChallengeRecord | None:
        return await self.inner.get_by_request_id(request_id)

    async def get_by_payment(self, key: PaymentKey) -> ChallengeRecord | None:
        return await self.inner.get_by_payment(key)

    async def get_by_tx_hash(self, tx_hash: str) -> ChallengeRecord | None:
        return await self.inner.get_by_tx_hash(tx_hash)

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        return await self.inner.transition(request)

    async def list_challenges(
        self,
        *,
        states: Sequence[State] | None = None,
        updated_before: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[ChallengeRecord]:
        return await self.inner.list_challenges(
            states=states, updated_before=updated_before, after=after, limit=limit
        )

    async def prune(
        self, *, states: Sequence[State], updated_before: float, limit: int = 1000
    ) -> int:
        return await self.inner.prune(states=states, updated_before=updated_before, limit=limit)

    async def save_task(
        self,
        task_id: str,
        document: Mapping[str, Any],
        *,
        expect_version: int | None,
        prune_after: float | None = None,
    ) -> int | None:
        return await self.inner.save_task(
            task_id, document, expect_version=expect_version, prune_after=prune_after
        )

    async def get_task(self, task_id: str) -> tuple[dict[str, Any], int] | None:
        return await self.inner.get_task(task_id)

    async def prune_tasks(self, *, before: float, limit: int = 1000) -> int:
        return await self.inner.prune_tasks(before=before, limit=limit)

    async def count_hits(
        self, hits: Mapping[str, int], *, window_end: float, now: float
    ) -> dict[str, int]:
        return await self.inner.count_hits(hits, window_end=window_end, now=now)

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        return await self.inner.acquire_lease(name, holder, ttl, now)

    async def release_lease(self, lease: Lease, value: str | None) -> bool:
        return await self.inner.release_lease(lease, value)

    # Taking a lease over: the inner store's, when it can (``LeaseTakeoverStore``);
    # without it nobody is seen holding a lease, so it passes on only once it expires.

    async def held_lease(self, name: str, now: float) -> Lease | None:
        if not isinstance(self.inner, LeaseTakeoverStore):
            return None
        return await self.inner.held_lease(name, now)

    async def take_over_lease(
        self, held: Lease, holder: str, ttl: float, now: float
    ) -> Lease | None:
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
        return await self.inner.find_challenges(
            states=states, payer=payer, before=before, limit=limit
        )

    async def add_counts(
        self, counts: Mapping[tuple[int, str], int], *, forget_before: int
    ) -> None:
        await self.inner.add_counts(counts, forget_before=forget_before)

    async def read_counts(self, *, start: int, end: int) -> dict[tuple[int, str], int]:
        return await self.inner.read_counts(start=start, end=end)

    async def migrate(self) -> list[str]:
        """The inner store's migrations, if it has any (``MigratingStore``)."""
        if isinstance(self.inner, MigratingStore):
            return await self.inner.migrate()
        return []

    # Moving between stores: the inner store's, when it has them (``PortableStore``).

    async def export_items(self) -> AsyncIterator[ExportItem]:
        async for item in self._portable().export_items():
            yield item

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        await self._portable().import_items(items, now=now)

    def _portable(self) -> PortableStore:
        if not isinstance(self.inner, PortableStore):
            raise ValueError(f"the {self.inner.name} store cannot export or import")
        return self.inner

    # Credits: only when ``inner`` keeps them (``CreditStore``); see ``keeps_credits``.

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        return await self._credits().credit(
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
        return await self._credits().spend(
            grant_id, cost, now=now, keep_until=keep_until, rate=rate, credits=credits
        )

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        return await self._credits().refund(grant_id, amount, now=now)

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        return await self._credits().get_credits(grant_id)

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        inner = self.inner
        if not isinstance(inner, UsageStore):
            raise TypeError(f"the {inner.name} store keeps no used calls (keeps_used_calls)")
        return await inner.settle(grant_id, release, now=now, call=call)

    @property
    def keeps_credits(self) -> bool:
        """Whether the wrapped store keeps credits (the registry asks before it meters calls)."""
        return keeps_credits(self.inner)

    @property
    def keeps_used_calls(self) -> bool:
        """Whether the wrapped store settles calls charged by use (``UsageStore``)."""
        return keeps_used_calls(self.inner)

    def _credits(self) -> CreditStore:
        # (no isinstance per call: the registry checked ``keeps_credits`` once at start-up)
        return cast(CreditStore, self.inner)
