"""The fixed access flow of POST /x402/access (docs/protocol/flow.md). Plugins cannot reorder it.

Every request goes through these steps in this order; a failing step answers at
once and nothing after it runs. Bad input fails before step 6, so it never
reaches the store's write path or the chain.

 0. Parse the body: a JSON object of at most 64 KiB.  -> 400/415 INVALID_REQUEST
 1. Decode ``PAYMENT-SIGNATURE`` if present.          -> 400 INVALID_REQUEST
 2. Resolve the plan: ``body.planId``, else ``accepted.extra.planId``. None and
    no payment: *discovery*, every plan. Unknown -> 400 TIER_NOT_FOUND. No
    payment: a *challenge*, created (or found by requestId) PENDING. Unpaid
    requests count against the client's limit, and so does a payment that
    fails (step 5 or 8: its 402 becomes the 429 past it). -> 429 RATE_LIMITED
    A *top-up* (``body.topUp``, or the gateway's token) first finds the grant it
    names (``top_ups.find_grant``: delivered, sells calls, not expired) and
    binds it into the challenge it creates; a request whose challenge is bound
    to another grant (or to none) is 409 REQUEST_ID_CONFLICT.
 3. Find the challenge: ``accepted.extra.challengeId``, else ``body.requestId``,
    else the one that claimed this very payment, else none yet (a
    discovery-first purchase: its challenge is created, already SETTLING, once
    the payment passes step 5).
 4. Answer from the record's state (``_step``), in a bounded loop: a lost
    compare-and-set re-reads the record and answers from its state now.
    DELIVERED -> the grant (410 GRANT_REVOKED once the seller revoked it),
    PAID -> step 10, both only on proof (``proof``); OWED (a top-up its
    grant can no longer use) -> 410 GRANT_REVOKED naming the owed payment;
    SETTLING -> the chain decides at once (``settling``), else 409 while a lease
    runs, 502 after; EXPIRED/CANCELLED -> 410; PENDING past expiresAt -> 410.
 5. Check the payment against the requirement this server offered (the one
    of the challenge's offers it claims: network, token, that token's amount
    and EIP-712 domain).                              -> 402 PAYMENT_FAILED
 6. Claim the payment ``(chainId, asset, from, nonce)`` and
 7. move PENDING -> SETTLING, both in ONE compare-and-set, before anything goes
    on-chain.          -> 409 TX_ALREADY_REDEEMED / 409 SETTLEMENT_IN_PROGRESS
 8. Mark the attempt submitted (its own compare-and-set), then settle with the
    settler of the payment's network (``settlers``: its failover, when it has
    several), our ids removed (``protocol.for_third_parties``). Rejected:
    SETTLING -> PENDING, the claim released, 402; 503 SETTLER_UNAVAILABLE
    (+ Retry-After) when no settler could be reached; but "nonce already used"
    is the chain's to decide. Unknown: the lease ends and the chain decides
    (step 4 again).
 9. Confirm the settler's transaction on-chain (when there is an RPC), claim
    its txHash and move SETTLING -> PAID with the payer of the authorization
    checked in step 5 (never a settler's word for it).
10. Issue the credential, credit the calls of a plan that sells them, and PAID
    -> DELIVERED (``delivery``); a top-up only credits its grant, or moves PAID
    -> OWED when that grant was revoked or expired meanwhile. If the issuer
    fails the record stays PAID; a retry resumes here.
11. 200 with the AccessGrant and ``PAYMENT-RESPONSE``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from x402srv.access import moves
from x402srv.access.delivery import DELIVERY_LEASE_SECONDS, Delivery
from x402srv.access.failpoints import failpoint
from x402srv.access.ids import uuid4_hex, uuid4_str
from x402srv.access.proof import Caller, Verifier, replays
from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.access.recovery import SettlingResolver
from x402srv.access.top_ups import find_grant
from x402srv.config.models import Config, Plan
from x402srv.errors import (
    ChallengeExpired,
    GrantRevoked,
    InternalError,
    InvalidRequest,
    PaymentFailed,
    RateLimited,
    RequestIdConflict,
    SettlementInProgress,
    SettlementPending,
    SettlerUnavailable,
    StoreUnavailable,
    TierNotFound,
    TxAlreadyRedeemed,
)
from x402srv.interfaces import (
    Clock,
    CredentialIssuer,
    PaymentClaimed,
    Rejected,
    Settled,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    StateMismatch,
    Store,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
    TxClaimed,
    Unknown,
    system_clock,
)
from x402srv.server.logs import fingerprint
from x402srv.server.metrics import Metrics
from x402srv.server.metrics import current as current_metrics
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.verdicts import NotTransferred, Transferred
from x402srv.usage.counters import Tally
from x402srv.usage.unpaid_limit import UnpaidLimiter
from x402srv.wire.offers import AccessGranted, OfferBuilder, PaymentOffer, plan_offers
from x402srv.wire.protocol import (
    AccessBody,
    PaymentPayload,
    decode_payment_header,
    for_third_parties,
)
from x402srv.wire.protocol import parse_access_body as parse_body
from x402srv.wire.reasons import Reason

__all__ = ["DELIVERY_LEASE_SECONDS", "AccessPipeline", "AccessRequest", "AccessResult"]

log = logging.getLogger("x402srv.access.pipeline")

AccessResult = PaymentOffer | AccessGranted
#: What a step gives: the answer, or the record as it is now, to look at again.
Next = AccessResult | ChallengeRecord

#: Retry-After for an outcome that only the chain can tell.
PENDING_RETRY_AFTER = 5
#: Retry-After when no settler could be reached (a restarting facilitator, a breaker cooling).
SETTLER_RETRY_AFTER = 10
#: What the analytics count a payment turned away by a settler outage as.
SETTLER_UNAVAILABLE_REASON = "settler_unavailable"
#: How many states one request follows a record through (lost races) before giving up.
MAX_STEPS = 6
_CAIP2 = re.compile(r"eip155:([1-9][0-9]{0,18})")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def payment_key(payment: PaymentPayload) -> PaymentKey:
    """``(chainId, asset, from, nonce)`` of the network and token the payment claims.

    A claim names the chain it is spent on: the same nonce on two chains is two
    payments. A payment that names no EVM chain or token is refused (402) here.
    """
    accepted = payment.accepted
    chain = _CAIP2.fullmatch(accepted.network)
    if chain is None:
        raise PaymentFailed(Reason.INVALID_NETWORK, "accepted.network is not an eip155 network")
    if not _ADDRESS.fullmatch(accepted.asset):
        raise PaymentFailed(Reason.INVALID_PAYMENT_REQUIREMENTS, "accepted.asset is no address")
    auth = payment.payload.authorization
    return PaymentKey(int(chain.group(1)), accepted.asset, auth.from_, auth.nonce)


def _chains(
    config: Config, chain: ChainReader | Mapping[str, ChainReader] | None
) -> dict[str, ChainReader]:
    """One reader per network; a single reader (the one-network form, tests) serves all."""
    if chain is None:
        return {}
    if isinstance(chain, ChainReader):
        return {network.caip2: chain for network in config.resolved_networks}
    return dict(chain)


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """What the HTTP route hands over: raw bytes, two header values and the client's key."""

    body: bytes
    content_type: str | None
    payment_signature: str | None
    client: str | None = None


class AccessPipeline:
    def __init__(
        self,
        config: Config,
        *,
        store: Store,
        settler: Settler,
        issuer: CredentialIssuer,
        chain: ChainReader | Mapping[str, ChainReader] | None,
        clock: Clock = system_clock,
        metrics: Metrics | None = None,
        limiter: UnpaidLimiter | None = None,
        tally: Tally | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or current_metrics()
        self.store = store
        self.settler = settler
        self.issuer = issuer
        #: One chain reader per network (CAIP-2 id); networks without an RPC have none.
        self.chains = _chains(config, chain)
        self.clock = clock
        self.limiter = limiter
        self.offers = OfferBuilder(config)
        self.plans = config.plan_map  # a pydantic private attribute: slow to reach per request
        self.network = config.network_info  # the first network's first token
        self.lease_seconds = config.settlement.lease_seconds
        self.mover = moves.Mover(store, clock)
        self.verifier = Verifier(self.offers, config.option, clock)
        self.resolver = SettlingResolver(self.chains, self.mover, clock)
        self.delivery = Delivery(self.mover, issuer, self.offers, self.plans, self.metrics, clock)
        self.observers = self.mover.observers  # see every applied transition (A2A streams)
        # Analytics (``tally``): a dict increment per event, flushed to the store in the background.
        self.tally = tally or Tally(store, clock, keep_seconds=config.analytics.keep_days * 86_400)
        self.observers.append(self.tally.observe)

    @property
    def chain(self) -> ChainReader | None:
        """The first network's chain reader (the one network of the one-network form)."""
        return self.chains.get(self.network.caip2)

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        """Every state change goes through here (operators' moves too)."""
        return await self.mover.apply(request)

    # ------------------------------------------------------------ steps 0-2

    async def handle(self, request: AccessRequest) -> AccessResult:
        body = parse_body(request.body, request.content_type)
        payment = None
        if request.payment_signature is not None:
            payment = decode_payment_header(request.payment_signature)
        return await self.access(body, payment, client=request.client)

    async def access(
        self,
        body: AccessBody,
        payment: PaymentPayload | None,
        *,
        client: str | None = None,
        top_up_of: str | None = None,
    ) -> AccessResult:
        """Steps 2-11 for an already-parsed request (HTTP, the gateway and A2A come here).

        ``top_up_of`` (the gateway, for a token it verified) names the grant a
        payment tops up by its challengeId; a body names it by requestId (``topUp``).
        A payment that fails counts against ``client``'s unpaid-request limit.
        """
        try:
            return await self._access(body, payment, client, top_up_of)
        except PaymentFailed:
            await self.limit_failed(client)
            raise

    async def _access(
        self,
        body: AccessBody,
        payment: PaymentPayload | None,
        client: str | None,
        top_up_of: str | None,
    ) -> AccessResult:
        plan_id = body.plan_id or (payment.extra_str("planId") if payment else None)
        if body.top_up is not None or top_up_of is not None:
            return await self._top_up(body, payment, plan_id, top_up_of, client)
        if plan_id is None:
            if payment is not None:
                raise TierNotFound("no planId in the body or in accepted.extra.planId")
            await self.limit_unpaid(client)
            return self.offers.discovery()
        plan = self.plans.get(plan_id)
        if plan is None:
            raise TierNotFound(f"no plan {plan_id[:64]!r}; POST {{}} lists the plans")
        if payment is None:
            await self.limit_unpaid(client)
            return await self._challenge(body, plan)
        return await self._settlement(body, plan, payment)

    async def limit_unpaid(self, client: str | None) -> None:
        """429 for a client over its unpaid-request limit; paying requests never come here.

        Every unpaid request passes here (discovery, challenges, the gateway's 402s,
        A2A calls without a payment), so this is where the analytics count them.
        """
        self.tally.add("unpaid")
        if self.limiter is not None and client is not None:
            try:
                await self.limiter.check(client)
            except RateLimited:
                self.tally.add("limited")
                raise

    async def limit_failed(self, client: str | None) -> None:
        """A payment that failed counts as an unpaid request; 429 past the limit.

        A made-up signature costs an ecrecover and a store read (a signed one
        from an empty wallet, a settler's call), and signing is free: without
        this, junk payments would be the one unlimited request. A payment that
        verifies never comes here.
        """
        if self.limiter is not None and client is not None:
            try:
                await self.limiter.check(client)
            except RateLimited:
                self.tally.add("limited")
                raise

    async def _top_up(
        self,
        body: AccessBody,
        payment: PaymentPayload | None,
        plan_id: str | None,
        top_up_of: str | None,
        client: str | None,
    ) -> AccessResult:
        """Step 2 for a top-up: the grant is found and checked before anything is stored."""
        if plan_id is not None and plan_id not in self.plans:
            raise TierNotFound(f"no plan {plan_id[:64]!r}; POST {{}} lists the plans")
        if payment is None:
            await self.limit_unpaid(client)
        grant = await find_grant(
            self.store,
            self.plans,
            request_id=body.top_up,
            challenge_id=top_up_of if body.top_up is None else None,
            plan_id=plan_id,
            now=self.clock(),
        )
        plan = self.plans[grant.plan_id]
        if payment is None:
            return await self._challenge(body, plan, grant)
        return await self._settlement(body, plan, payment, grant)

    async def _challenge(
        self, body: AccessBody, plan: Plan, grant: ChallengeRecord | None = None
    ) -> AccessResult:
        body = replace(body, request_id=body.request_id or uuid4_str())
        assert body.request_id is not None
        new = self._new_record(plan, body.request_id, body.resource_id, grant=grant)
        created = await self.store.create_challenge(new)
        assert not isinstance(created, PaymentClaimed)
        record, was_created = created
        if was_created:
            # DEBUG, not INFO: anyone can send unpaid requests, and a line for each
            # would let them fill the disk. Everything after a payment is at INFO.
            self._log_created(record, logging.DEBUG)
        self._same_request(record, body, plan, grant)
        return await self._answer(record, Caller(body))

    def _new_record(
        self,
        plan: Plan,
        request_id: str,
        resource_id: str,
        *,
        implicit: bool = False,
        grant: ChallengeRecord | None = None,
    ) -> ChallengeRecord:
        first = plan.options[0]
        return ChallengeRecord.new(
            challenge_id=uuid4_str(),
            request_id=request_id,
            plan_id=plan.plan_id,
            resource_id=resource_id,
            amount=str(first.amount),
            network=first.network.caip2,
            asset=first.network.asset,
            pay_to=self.config.seller.wallet_address,
            max_timeout_seconds=self.config.server.max_timeout_seconds,
            now=self.clock(),
            ttl_seconds=self.config.server.challenge_ttl_seconds,
            implicit=implicit,
            options=plan_offers(plan),
            calls=plan.calls,
            top_up_of=grant.challenge_id if grant is not None else None,
        )

    def _log_created(self, record: ChallengeRecord, level: int = logging.INFO) -> None:
        self.metrics.challenge_created()
        self.tally.add(f"challenge:{record.plan_id}")
        if log.isEnabledFor(level):
            log.log(
                level,
                "challenge %s request %s: created as %s for plan %s",
                record.challenge_id,
                fingerprint(record.request_id),
                record.state.value,
                record.plan_id,
                extra={
                    "challenge_id": record.challenge_id,
                    "request_fp": fingerprint(record.request_id),
                },
            )

    @staticmethod
    def _same_request(
        record: ChallengeRecord,
        body: AccessBody,
        plan: Plan,
        grant: ChallengeRecord | None = None,
    ) -> None:
        if record.plan_id != plan.plan_id or record.resource_id != body.resource_id:
            # Nothing stored is named (docs/design.md, "Who gets a grant"): this
            # answer may reach a caller that has proven nothing yet.
            raise RequestIdConflict(
                "this request belongs to a purchase of another plan or resource; "
                "use a new requestId for another purchase"
            )
        if record.top_up_of != (grant.challenge_id if grant is not None else None):
            if record.top_up_of is None:
                what = "a purchase"
            elif grant is None:
                what = "a top-up: repeat it with its topUp (or the grant's token)"
            else:
                what = "a top-up of another grant"
            raise RequestIdConflict(f"this request belongs to {what}; use a new requestId")

    # ------------------------------------------------------------ step 3

    async def _settlement(
        self,
        body: AccessBody,
        plan: Plan,
        payment: PaymentPayload,
        grant: ChallengeRecord | None = None,
    ) -> AccessResult:
        key = payment_key(payment)
        caller = Caller(body, payment, key)
        record = await self._find_challenge(body, payment, key)
        if record is None:
            return await self._implicit_purchase(caller, plan, grant)
        if replays(record, key):
            # Found by this very payment (step 3's third way) or named by a caller
            # that replays it: the payment must prove the purchase before anything
            # about it is answered (402 or 409 otherwise, as for a fresh payment).
            self.verifier.prove(record, caller)
        self._same_request(record, body, plan, grant)
        return await self._answer(record, caller)

    async def _find_challenge(
        self, body: AccessBody, payment: PaymentPayload, key: PaymentKey
    ) -> ChallengeRecord | None:
        challenge_id = payment.extra_str("challengeId")
        if challenge_id is not None:
            record = await self.store.get_challenge(challenge_id)
            if record is None:
                raise InvalidRequest("accepted.extra.challengeId names no challenge on this server")
            if body.request_id and body.request_id != record.request_id:
                raise RequestIdConflict("requestId and accepted.extra.challengeId disagree")
            return record
        if body.request_id:
            record = await self.store.get_by_request_id(body.request_id)
            if record is not None:
                return record
        record = await self.store.get_by_payment(key)
        if record is None:
            return None
        # A payment alone finds only a discovery-first purchase (a challenge-first
        # buyer names its challenge), and then it must still prove it (_settlement).
        if not record.implicit:
            raise TxAlreadyRedeemed(
                "this payment was already redeemed; fetch its grant with its requestId"
            )
        return record

    async def _implicit_purchase(
        self, caller: Caller, plan: Plan, grant: ChallengeRecord | None = None
    ) -> AccessResult:
        """A discovery-first purchase: check, then create the challenge already SETTLING.

        Nothing is stored before the payment passes step 5, and concurrent replays
        of one payment converge on a single challenge through the claim. Its
        requestId is the body's, else the one the 402 offered (echoed in
        ``accepted.extra.requestId``), so the buyer's own header proves it on a
        retry. A payment without one (no standard client sends that) still buys,
        under a requestId made here: the grant says it, and only it fetches the
        grant again, since such a header is exactly what anyone can rebuild from
        the chain.
        """
        assert caller.payment is not None
        assert caller.key is not None
        body = caller.body
        request_id = body.request_id or caller.payment.request_id or uuid4_str()
        pending = self._new_record(plan, request_id, body.resource_id, implicit=True, grant=grant)
        claim = self._claim(pending, caller, pending.created_at)
        settling = pending.apply(claim.changes, State.SETTLING, claim.at, claim.reason)
        created = await self.store.create_challenge(settling, claim_payment=caller.key)
        if isinstance(created, PaymentClaimed):
            owner = await self.store.get_challenge(created.owner)
            if owner is None or not owner.implicit or owner.plan_id != plan.plan_id:
                self.tally.failed("already_redeemed")
                raise TxAlreadyRedeemed("this payment is already used for another challenge")
            self.verifier.prove(owner, caller)  # a concurrent replay: its buyer's, or nobody's
            self._same_request(owner, body, plan, grant)
            return await self._answer(owner, caller)
        record, was_created = created
        if not was_created:
            self._same_request(record, body, plan, grant)
            return await self._answer(record, caller)
        self._log_created(record)
        failpoint("after-claim")
        return await self._answer(await self._settle(record, caller), caller)

    # ------------------------------------------------------------ step 4

    async def _answer(self, start: ChallengeRecord | AccessResult, caller: Caller) -> AccessResult:
        """Follow the record through its states until one of them answers."""
        current = start
        for _ in range(MAX_STEPS):
            if not isinstance(current, ChallengeRecord):
                return current
            current = await self._step(current, caller)
        if isinstance(current, ChallengeRecord):
            log.error("challenge %s: gave up following concurrent updates", current.challenge_id)
            raise SettlementInProgress("the challenge is changing; retry", retry_after=1)
        return current

    async def _step(self, record: ChallengeRecord, caller: Caller) -> Next:
        """One state's answer: a final result, or the record as it is now to look at again."""
        state = record.state
        if state is State.DELIVERED:
            self.verifier.prove(record, caller)
            if record.revoked_at is not None:
                raise GrantRevoked(
                    f"the grant of challenge {record.challenge_id} was revoked by the seller"
                )
            return self.offers.granted(record)
        if state in (State.EXPIRED, State.CANCELLED):
            raise ChallengeExpired(f"challenge {record.challenge_id} is {state.value.lower()}")
        if state is State.OWED:
            self.verifier.prove(record, caller)
            raise GrantRevoked(
                "the grant this top-up was for was revoked or expired before the top-up "
                f"could be credited; its payment ({record.tx_hash}) is recorded as owed to you"
            )
        if state is State.PAID:
            self.verifier.prove(record, caller)
            return await self._deliver(record)
        if state is State.SETTLING:
            if not self.verifier.proves(record, caller):
                # Not its buyer, but a valid payment for this very challenge: it may have
                # the chain decide a stale attempt; a grant still needs the proof.
                self.verifier.checked(record, caller)
            return await self._settling(record)
        if self.clock() >= record.expires_at:
            current = await self.expire(record)
            if current.state is State.PENDING:
                raise ChallengeExpired(f"challenge {record.challenge_id} expired")
            return current  # EXPIRED answers 410 next; a payment claimed just before is followed
        if caller.payment is None:
            return self.offers.challenge(record, self.plans.get(record.plan_id))
        return await self._attempt(record, caller)

    async def _settling(self, record: ChallengeRecord) -> ChallengeRecord:
        """The chain decides a SETTLING record now, or the caller waits."""
        current = await self.resolve(record)
        if current.state is not State.SETTLING:
            return current
        assert current.payment is not None
        left = current.payment.lease_until - self.clock()
        if left > 0:
            raise SettlementInProgress(
                "this challenge is being settled now", retry_after=min(math.ceil(left), 30)
            )
        raise SettlementPending(
            "the chain has not shown the outcome of this payment yet; retry the same request later",
            retry_after=PENDING_RETRY_AFTER,
        )

    async def resolve(self, record: ChallengeRecord, *, grace: float = 0.0) -> ChallengeRecord:
        """A SETTLING record decided from the chain (``settling``); the reconciler's too."""
        return await self.resolver.resolve(record, grace=grace)

    async def expire(self, record: ChallengeRecord) -> ChallengeRecord:
        """PENDING past expiresAt -> EXPIRED; returns the record as it is now."""
        result = await self.mover.apply(moves.expire(record, self.clock()))
        if isinstance(result, TransitionApplied | StateMismatch) and result.record is not None:
            return result.record
        return record

    # ------------------------------------------------------------ steps 5-7

    async def _attempt(self, record: ChallengeRecord, caller: Caller) -> Next:
        result = await self.mover.apply(self._claim(record, caller, self.clock()))
        if isinstance(result, PaymentClaimed):
            self.tally.failed("already_redeemed")
            raise TxAlreadyRedeemed("this payment is already used for another challenge")
        if isinstance(result, StateMismatch):
            if result.record is None:
                raise InternalError()
            if result.record.state is State.SETTLING:
                # Another request won this very moment: it is settling, nothing to ask yet.
                raise SettlementInProgress("this challenge is being settled now", retry_after=2)
            return result.record
        assert isinstance(result, TransitionApplied)
        failpoint("after-claim")
        return await self._settle(result.record, caller)

    def _claim(self, record: ChallengeRecord, caller: Caller, at: float) -> TransitionRequest:
        """Steps 5-7 as one move: the payment checked, then claimed with PENDING -> SETTLING."""
        assert caller.key is not None
        self.tally.add(f"tried:{record.plan_id}")
        try:
            auth = self.verifier.checked(record, caller)
        except PaymentFailed as failure:
            self.tally.failed(failure.reason)
            raise
        return moves.settle(
            record,
            auth,
            caller.key,
            at,
            attempt_id=uuid4_hex(),
            lease_seconds=self.lease_seconds,
            offer=caller.offer,
        )

    # ------------------------------------------------------------ steps 8-9

    async def _settle(self, record: ChallengeRecord, caller: Caller) -> Next:
        assert record.payment is not None
        assert caller.payment is not None
        assert caller.checked is not None
        assert caller.option is not None
        handed = replace(record.payment, submitted=True, attempt_id=uuid4_hex())
        reason = f"handed to settler {self.settler.name}"
        submitted = await self.mover.apply(moves.note(record, self.clock(), reason, handed))
        if not isinstance(submitted, TransitionApplied):
            return await self.mover.current(record, submitted)
        record = submitted.record
        request = SettlementRequest(
            challenge_id=record.challenge_id,
            attempt_id=handed.attempt_id,
            authorization=caller.checked[1],
            payload=for_third_parties(caller.payment.model_dump(mode="json", by_alias=True)),
            requirements=for_third_parties(self.offers.offered_requirement(record)),
            network=caller.option,
        )
        log.info(
            "challenge %s: settling on %s with %s",
            record.challenge_id,
            record.network,
            self.settler.name,
        )
        hooks = moves.AttemptHooks(self.mover, record)
        started = time.perf_counter()
        outcome = await self._run_settler(request, hooks)
        elapsed, outcome_name = time.perf_counter() - started, type(outcome).__name__.lower()
        self.metrics.settlement(self.settler.name, outcome_name, elapsed)
        self.tally.settler(self.settler.name, outcome_name, elapsed)
        try:
            return await self._after_settlement(hooks.record, outcome)
        except StoreUnavailable:
            if isinstance(outcome, Rejected):
                raise  # nothing moved on-chain: a plain 503, retry later
            # The chain may already hold the transfer: never answer "nothing was settled".
            raise SettlementPending(
                "the payment may have settled but could not be recorded yet; retry later",
                retry_after=PENDING_RETRY_AFTER,
            ) from None

    async def _run_settler(
        self, request: SettlementRequest, hooks: moves.AttemptHooks
    ) -> SettlementOutcome:
        try:
            settling = self.settler.settle(request, hooks)
            return await asyncio.wait_for(settling, max(1.0, self.lease_seconds - 2.0))
        except TimeoutError:
            return Unknown("settlement did not finish within the lease")
        except Exception:
            # A settler must not raise; if it does it may have broadcast: treat as unknown.
            log.exception(
                "challenge %s: settler %s raised", request.challenge_id, self.settler.name
            )
            return Unknown("settler raised")

    async def _after_settlement(self, record: ChallengeRecord, outcome: SettlementOutcome) -> Next:
        if isinstance(outcome, Rejected) and outcome.reason == Reason.NONCE_USED:
            outcome = await self._used_already(record, outcome)
        if isinstance(outcome, Settled):
            # Who paid is whoever signed the authorization checked in step 5, whatever
            # a settler says (a facilitator's "payer" is its word, not the chain's).
            assert record.payment is not None
            return await self._record_paid(
                record, outcome.tx_hash, record.payment.payer, outcome.by
            )
        if isinstance(outcome, Rejected):
            return await self._rejected(record, outcome)
        log.warning("challenge %s: outcome unknown: %s", record.challenge_id, outcome.reason)
        return await self._end_lease(record, outcome)

    async def _rejected(self, record: ChallengeRecord, outcome: Rejected) -> Next:
        """Nothing moved: release the claim; the payment's fault is 402, the settlers' 503.

        ``settler_failed`` means no settler of the network could take the payment
        (unreachable, every breaker open, the network unsupported): the payment is
        fine and the same one may be sent again after ``Retry-After``.
        """
        unavailable = outcome.settler_failed
        self.tally.failed(SETTLER_UNAVAILABLE_REASON if unavailable else outcome.reason)
        reason = (
            f"no settler could be reached ({outcome.reason}); nothing moved, claim released"
            if unavailable
            else f"settlement failed: {outcome.reason}"
        )
        result = await self.mover.apply(moves.release(record, self.clock(), reason))
        if not isinstance(result, TransitionApplied):
            return await self.mover.current(record, result)
        if unavailable:
            raise SettlerUnavailable(
                f"no settler of {record.network} could be reached; nothing was transferred "
                "and the payment is still good: send the same request again later",
                retry_after=SETTLER_RETRY_AFTER,
            )
        raise PaymentFailed(outcome.reason, outcome.detail)

    async def _used_already(self, record: ChallengeRecord, said: Rejected) -> SettlementOutcome:
        """A settler says the authorization is used: by whom is the chain's to say.

        It may be this very payment, settled by an earlier attempt or another
        settler (a facilitator that settled after we gave up on it): then it is
        paid. Only a chain that shows it spent elsewhere (or cancelled) refuses it.
        """
        if self.resolver.chain_of(record) is None:
            return said  # nothing to ask: the settler's word is all there is
        verdict = await self.resolver.verdict(record)
        if isinstance(verdict, Transferred):
            assert record.payment is not None
            by = "an earlier settlement of this authorization (shown by the chain)"
            return Settled(verdict.tx_hash, record.payment.payer, by)
        if isinstance(verdict, NotTransferred):
            return said
        return Unknown("the settler says the authorization is used; the chain has not shown it")

    async def _end_lease(self, record: ChallengeRecord, outcome: Unknown) -> ChallengeRecord:
        """Unknown outcome: end this attempt's lease so the chain decides from now on."""
        assert record.payment is not None
        tx_hint = record.payment.broadcast_tx_hash or outcome.tx_hash
        ended = replace(record.payment, lease_until=self.clock(), broadcast_tx_hash=tx_hint)
        reason = f"outcome unknown: {outcome.reason}"
        result = await self.mover.apply(moves.note(record, self.clock(), reason, ended))
        return await self.mover.current(record, result)

    async def _record_paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str, by: str | None = None
    ) -> Next:
        chain = self.resolver.chain_of(record)
        if chain is not None and not await self.resolver.settles_in(record, tx_hash):
            # A settler's word alone never grants access: what the chain does not show
            # (yet) is an unknown outcome, which the chain decides.
            log.warning("challenge %s: %s does not show this payment", record.challenge_id, tx_hash)
            return await self._end_lease(record, Unknown("the chain does not confirm the settler"))
        reason = f"settled on-chain by {by}" if by else "settled on-chain"
        if by:
            log.info("challenge %s: %s settled it in %s", record.challenge_id, by, tx_hash)
        result = await self.resolver.mark_paid(record, tx_hash, payer, reason)
        if isinstance(result, TxClaimed):
            log.error("challenge %s: %s belongs to %s", record.challenge_id, tx_hash, result.owner)
            # The settler's word is worth nothing now: the chain decides at the next retry.
            await self._end_lease(record, Unknown("the settler named another challenge's tx"))
            raise TxAlreadyRedeemed("this transaction is already redeemed for another challenge")
        if not isinstance(result, TransitionApplied):
            return await self.mover.current(record, result)
        failpoint("after-paid")
        return await self._deliver(result.record)

    # ------------------------------------------------------------ steps 10-11

    async def _deliver(self, record: ChallengeRecord) -> Next:
        delivered = await self.deliver(record)
        if delivered.state is State.DELIVERED:
            return self.offers.granted(delivered)
        return delivered

    async def deliver(self, record: ChallengeRecord, *, wait: bool = True) -> ChallengeRecord:
        """Step 10 for a PAID record (``delivery``); the reconciler's too."""
        return await self.delivery.deliver(record, wait=wait)
