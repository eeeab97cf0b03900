"""The fixed access flow of ``POST /x402/access`` (SPEC 4.2). Plugins cannot reorder it.

Every request goes through these steps in this order; a failing step answers at
once and nothing after it runs. Bad input fails before step 6, so it never
reaches the store's write path or the chain.

 0. Parse the body: a JSON object of at most 64 KiB (``planId``, ``requestId``,
    ``resourceId``).                                  -> 400/415 INVALID_REQUEST
 1. Decode ``PAYMENT-SIGNATURE`` if present.          -> 400 INVALID_REQUEST
 2. Resolve the plan: ``body.planId``, else ``accepted.extra.planId``. No plan and
    no payment is *discovery* (402, every plan). Unknown plan -> 400 TIER_NOT_FOUND.
    Without a payment this is a *challenge*: create (or find, by requestId) a
    PENDING record and answer 402 for it.
 3. Find the challenge: ``accepted.extra.challengeId``, else ``body.requestId``,
    else the challenge that already claimed this very payment, else none yet
    (a discovery-first purchase; its challenge is created in step 6).
 4. Pre-settlement state check (``_dispatch``): DELIVERED -> the stored grant;
    EXPIRED/CANCELLED -> 410; PENDING past expiresAt -> EXPIRED, 410; SETTLING
    within its lease -> 409 SETTLEMENT_IN_PROGRESS; SETTLING past its lease ->
    resolved from the chain first (SPEC 5.2); PAID -> step 10.
 5. Check the payment against the requirement this server offered
    (``protocol.check_payment``).                     -> 402 PAYMENT_FAILED
 6. Claim the payment ``(chainId, asset, from, nonce)`` and
 7. move PENDING -> SETTLING, both in ONE compare-and-set, before anything goes
    on-chain.          -> 409 TX_ALREADY_REDEEMED / 409 SETTLEMENT_IN_PROGRESS
 8. Mark the attempt submitted (a compare-and-set of its own), then settle with
    the configured strategy. Rejected: SETTLING -> PENDING and the claim
    released, 402. Unknown: the lease is ended, the record stays SETTLING and is
    resolved from the chain; still unknown -> 502 SETTLEMENT_PENDING. A SETTLING
    record that was never submitted (its process died) is simply released.
 9. Record the txHash (claimed atomically) and SETTLING -> PAID.
10. Issue the credential and PAID -> DELIVERED with the grant stored. If the
    issuer fails the record stays PAID; a retry resumes here.
11. 200 with the AccessGrant and ``PAYMENT-RESPONSE``.

A lost compare-and-set is never an error by itself: the pipeline re-reads the
record and answers from the state it is in now.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .chain import ChainReader, ChainUnavailable
from .config import Config, Plan
from .eip712 import Eip3009Domain
from .errors import (
    ChallengeExpired,
    CredentialPending,
    InternalError,
    InvalidRequest,
    PaymentFailed,
    ProblemError,
    RequestIdConflict,
    SettlementInProgress,
    SettlementPending,
    StoreUnavailable,
    TierNotFound,
    TxAlreadyRedeemed,
    X402SrvError,
)
from .failpoints import failpoint
from .ids import uuid4_hex, uuid4_str
from .interfaces import (
    Authorization,
    Clock,
    CredentialIssuer,
    GrantRequest,
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
from .metrics import Metrics
from .metrics import current as current_metrics
from .offers import AccessGranted, OfferBuilder, PaymentOffer
from .protocol import AccessBody, PaymentPayload, check_payment, decode_payment_header
from .protocol import parse_access_body as parse_body
from .records import ChallengeRecord, PaymentDetails, PaymentKey, RecordChanges, State, Transition
from .resolution import NotTransferred, Transferred, resolve_authorization

__all__ = ["AccessPipeline", "AccessRequest", "AccessResult"]

log = logging.getLogger("x402srv.pipeline")

AccessResult = PaymentOffer | AccessGranted

#: Retry-After for an outcome that only the chain can tell.
PENDING_RETRY_AFTER = 5
#: How many times one request follows a record through lost races before giving up.
MAX_REDISPATCH = 4


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """What the HTTP route hands over: raw bytes and two header values."""

    body: bytes
    content_type: str | None
    payment_signature: str | None


def _settling_move(
    record: ChallengeRecord,
    to: State,
    at: float,
    reason: str,
    changes: RecordChanges,
    *,
    release_payment: bool = False,
    claim_tx_hash: str | None = None,
) -> TransitionRequest:
    """A move of a SETTLING record that only the attempt which wrote it may make."""
    assert record.payment is not None
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.SETTLING,
        to=to,
        at=at,
        reason=reason,
        attempt_id=record.payment.attempt_id,
        changes=changes,
        release_payment=release_payment,
        claim_tx_hash=claim_tx_hash,
    )


def _stored(result: TransitionResult | None) -> ChallengeRecord | None:
    """The record as the store holds it after a compare-and-set, when the answer carries it."""
    if isinstance(result, TransitionApplied | StateMismatch):
        return result.record
    return None


class _AttemptHooks:
    """Lets a settler persist its txHash on the SETTLING record of its own attempt."""

    def __init__(self, pipeline: AccessPipeline, record: ChallengeRecord) -> None:
        self._pipeline = pipeline
        self._record = record

    @property
    def record(self) -> ChallengeRecord:
        """The SETTLING record as last written by this attempt."""
        return self._record

    async def note_broadcast(self, tx_hash: str) -> None:
        payment = self._record.payment
        assert payment is not None
        result = await self._pipeline.transition(
            _settling_move(
                self._record,
                State.SETTLING,
                self._pipeline.clock(),
                "transaction broadcast",
                RecordChanges(payment=replace(payment, broadcast_tx_hash=tx_hash.lower())),
            )
        )
        if isinstance(result, TransitionApplied):
            self._record = result.record


class AccessPipeline:
    def __init__(
        self,
        config: Config,
        *,
        store: Store,
        settler: Settler,
        issuer: CredentialIssuer,
        chain: ChainReader | None,
        clock: Clock = system_clock,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or current_metrics()
        self.store = store
        self.settler = settler
        self.issuer = issuer
        self.chain = chain
        self.clock = clock
        self.offers = OfferBuilder(config)
        self.plans = config.plan_map  # a pydantic private attribute: slow to reach per request
        self.network = config.network_info
        self.domain = Eip3009Domain(
            name=self.network.asset_name,
            version=self.network.asset_version,
            chain_id=self.network.chain_id,
            verifying_contract=self.network.asset,
        )
        self.lease_seconds = config.settlement.lease_seconds
        self.observers: list[Callable[[ChallengeRecord], None]] = []

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        """Every state change goes through here: one log line per applied transition.

        Each of ``observers`` is then called with the record as written (in this
        process only; A2A streams settlement progress from it). An observer must
        be quick and must not raise.
        """
        result = await self.store.transition(request)
        if isinstance(result, TransitionApplied):
            record = result.record
            for observer in self.observers:
                observer(record)
            log.info(
                "challenge %s request %s: %s -> %s (%s)",
                record.challenge_id,
                record.request_id,
                request.expect.value,
                request.to.value,
                request.reason,
                extra={
                    "challenge_id": record.challenge_id,
                    "request_id": record.request_id,
                    "from_state": request.expect.value,
                    "to_state": request.to.value,
                },
            )
        return result

    # ------------------------------------------------------------ steps 0-2

    async def handle(self, request: AccessRequest) -> AccessResult:
        body = parse_body(request.body, request.content_type)
        payment = None
        if request.payment_signature is not None:
            payment = decode_payment_header(request.payment_signature)
        return await self.access(body, payment)

    async def access(self, body: AccessBody, payment: PaymentPayload | None) -> AccessResult:
        """Steps 2-11 for an already-parsed request (HTTP and A2A both come through here)."""
        plan_id = body.plan_id or (payment.extra_str("planId") if payment else None)
        if plan_id is None:
            if payment is not None:
                raise TierNotFound("no planId in the body or in accepted.extra.planId")
            return self.offers.discovery
        plan = self.plans.get(plan_id)
        if plan is None:
            raise TierNotFound(f"no plan {plan_id!r}; POST {{}} lists the plans")
        if payment is None:
            return await self._challenge(body, plan)
        return await self._settlement(body, plan, payment)

    async def _challenge(self, body: AccessBody, plan: Plan) -> AccessResult:
        request_id = body.request_id or uuid4_str()
        created = await self.store.create_challenge(
            self._new_record(plan, request_id, body.resource_id, self.clock())
        )
        assert not isinstance(created, PaymentClaimed)
        record, was_created = created
        if was_created:
            # DEBUG, not INFO: anyone can send unpaid requests, and a line for each
            # would let them fill the disk (it was also a third of the cost of a
            # 402). Everything that follows a payment is logged at INFO.
            self._log_created(record, logging.DEBUG)
        self._same_request(record, body, plan)
        return await self._dispatch(record, None)

    def _new_record(
        self, plan: Plan, request_id: str, resource_id: str, now: float, *, implicit: bool = False
    ) -> ChallengeRecord:
        return ChallengeRecord(
            challenge_id=uuid4_str(),
            request_id=request_id,
            plan_id=plan.plan_id,
            resource_id=resource_id,
            amount=str(plan.amount),
            network=self.network.caip2,
            asset=self.network.asset,
            pay_to=self.config.seller.wallet_address,
            max_timeout_seconds=self.config.server.max_timeout_seconds,
            state=State.PENDING,
            created_at=now,
            expires_at=now + self.config.server.challenge_ttl_seconds,
            updated_at=now,
            implicit=implicit,
            history=(Transition(State.PENDING, now, "challenge created"),),
        )

    def _log_created(self, record: ChallengeRecord, level: int = logging.INFO) -> None:
        self.metrics.challenge_created()
        if not log.isEnabledFor(level):
            return
        log.log(
            level,
            "challenge %s request %s: created as %s for plan %s",
            record.challenge_id,
            record.request_id,
            record.state.value,
            record.plan_id,
            extra={
                "challenge_id": record.challenge_id,
                "request_id": record.request_id,
                "to_state": record.state.value,
            },
        )

    @staticmethod
    def _same_request(record: ChallengeRecord, body: AccessBody, plan: Plan) -> None:
        if record.plan_id != plan.plan_id or record.resource_id != body.resource_id:
            raise RequestIdConflict(
                f"requestId {record.request_id} belongs to plan {record.plan_id!r} and "
                f"resource {record.resource_id!r}; use a new requestId for another purchase"
            )

    # ------------------------------------------------------------ step 3

    async def _settlement(
        self, body: AccessBody, plan: Plan, payment: PaymentPayload
    ) -> AccessResult:
        auth = payment.payload.authorization
        key = PaymentKey(self.network.chain_id, self.network.asset, auth.from_, auth.nonce)
        record = await self._find_challenge(body, payment, key)
        if record is None:
            return await self._implicit_purchase(body, plan, payment, key)
        self._same_request(record, body, plan)
        return await self._dispatch(record, (payment, key))

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
        # (from, nonce, signature) become public on-chain once settled: a replayed
        # payment alone may only reach a discovery-first purchase, and only while the
        # authorization is still valid. Everyone else uses their requestId/challengeId.
        replay_window = record.payment.valid_before if record.payment else 0
        if not record.implicit or self.clock() > replay_window:
            raise TxAlreadyRedeemed(
                "this payment was already redeemed; fetch its grant with its requestId"
            )
        return record

    # ------------------------------------------------------------ step 4

    async def _dispatch(
        self,
        record: ChallengeRecord,
        payment: tuple[PaymentPayload, PaymentKey] | None,
        depth: int = 0,
    ) -> AccessResult:
        if depth > MAX_REDISPATCH:
            log.error("challenge %s: gave up following concurrent updates", record.challenge_id)
            raise SettlementInProgress("the challenge is changing; retry", retry_after=1)
        now = self.clock()
        state = record.state
        if state is State.DELIVERED:
            return self.offers.granted(record)
        if state in (State.EXPIRED, State.CANCELLED):
            raise ChallengeExpired(f"challenge {record.challenge_id} is {state.value.lower()}")
        if state is State.PAID:
            return await self._deliver(record, depth)
        if state is State.SETTLING:
            assert record.payment is not None
            if now < record.payment.lease_until:
                wait = math.ceil(record.payment.lease_until - now)
                raise SettlementInProgress(
                    "this challenge is being settled now", retry_after=min(wait, 30)
                )
            resolved = await self.resolve(record)
            if resolved.state is State.SETTLING:
                raise SettlementPending(
                    "the chain has not shown the outcome of this payment yet; retry the same "
                    "request later",
                    retry_after=PENDING_RETRY_AFTER,
                )
            return await self._dispatch(resolved, payment, depth + 1)
        # PENDING
        if now >= record.expires_at:
            await self.expire(record)
            raise ChallengeExpired(f"challenge {record.challenge_id} expired")
        if payment is None:
            return self.offers.challenge(record, self.plans.get(record.plan_id))
        return await self._attempt(record, payment[0], payment[1], depth)

    async def expire(self, record: ChallengeRecord) -> ChallengeRecord:
        """PENDING past expiresAt -> EXPIRED; returns the record as it is now."""
        result = await self.transition(
            TransitionRequest(
                challenge_id=record.challenge_id,
                expect=State.PENDING,
                to=State.EXPIRED,
                at=self.clock(),
                reason="expired before payment",
            )
        )
        return _stored(result) or record

    # ------------------------------------------------------------ steps 5-7

    def _details(self, auth: Authorization, key: PaymentKey, now: float) -> PaymentDetails:
        return PaymentDetails(
            payer=auth.payer,
            nonce=auth.nonce,
            value=str(auth.value),
            valid_after=auth.valid_after,
            valid_before=auth.valid_before,
            signature=auth.signature,
            key=str(key),
            attempt_id=uuid4_hex(),
            lease_until=now + self.lease_seconds,
        )

    async def _attempt(
        self, record: ChallengeRecord, payment: PaymentPayload, key: PaymentKey, depth: int
    ) -> AccessResult:
        now = self.clock()
        offered = self.offers.offered_requirement(record)
        auth = check_payment(payment, offered, self.network, self.domain, now)
        details = self._details(auth, key, now)
        result = await self.transition(
            TransitionRequest(
                challenge_id=record.challenge_id,
                expect=State.PENDING,
                to=State.SETTLING,
                at=now,
                reason="settlement started",
                changes=RecordChanges(payment=details),
                claim_payment=key,
            )
        )
        if isinstance(result, PaymentClaimed):
            raise TxAlreadyRedeemed("this payment is already used for another challenge")
        if isinstance(result, StateMismatch):
            if result.record is None:
                raise InternalError()
            if result.record.state is State.SETTLING:
                raise SettlementInProgress("this challenge is being settled now", retry_after=2)
            return await self._dispatch(result.record, (payment, key), depth + 1)
        assert isinstance(result, TransitionApplied)
        failpoint("after-claim")
        return await self._settle(result.record, auth, payment, offered, depth)

    async def _implicit_purchase(
        self, body: AccessBody, plan: Plan, payment: PaymentPayload, key: PaymentKey
    ) -> AccessResult:
        """A discovery-first purchase: check, then create the challenge already SETTLING.

        Nothing is stored before the payment passes step 5, and concurrent replays
        of one payment converge on a single challenge through the claim.
        """
        now = self.clock()
        request_id = body.request_id or uuid4_str()
        pending = self._new_record(plan, request_id, body.resource_id, now, implicit=True)
        offered = self.offers.offered_requirement(pending)
        auth = check_payment(payment, offered, self.network, self.domain, now)
        settling = pending.apply(
            RecordChanges(payment=self._details(auth, key, now)),
            State.SETTLING,
            now,
            "settlement started",
        )
        created = await self.store.create_challenge(settling, claim_payment=key)
        if isinstance(created, PaymentClaimed):
            owner = await self.store.get_challenge(created.owner)
            if owner is None or not owner.implicit or owner.plan_id != plan.plan_id:
                raise TxAlreadyRedeemed("this payment is already used for another challenge")
            return await self._dispatch(owner, (payment, key), 1)
        record, was_created = created
        if not was_created:
            self._same_request(record, body, plan)
            return await self._dispatch(record, (payment, key), 1)
        self._log_created(record)
        failpoint("after-claim")
        return await self._settle(record, auth, payment, offered, 0)

    # ------------------------------------------------------------ steps 8-9

    async def _settle(
        self,
        record: ChallengeRecord,
        auth: Authorization,
        payment: PaymentPayload,
        offered: dict[str, object],
        depth: int,
    ) -> AccessResult:
        submitted = await self._submit(record)
        if submitted is None:
            return await self._after_lost_race(record, None, depth)
        record = submitted
        assert record.payment is not None
        request = SettlementRequest(
            challenge_id=record.challenge_id,
            attempt_id=record.payment.attempt_id,
            authorization=auth,
            payload=payment.model_dump(mode="json", by_alias=True),
            requirements=offered,
            network=self.network,
        )
        log.info(
            "challenge %s request %s: settling with %s",
            record.challenge_id,
            record.request_id,
            self.settler.name,
        )
        hooks = _AttemptHooks(self, record)
        started = time.perf_counter()
        outcome = await self._run_settler(request, hooks)
        self.metrics.settlement(
            self.settler.name, type(outcome).__name__.lower(), time.perf_counter() - started
        )
        try:
            return await self._after_settlement(hooks.record, outcome, depth)
        except StoreUnavailable:
            if isinstance(outcome, Rejected):
                raise  # nothing moved on-chain: a plain 503, retry later
            # The chain may already hold the transfer: never answer "nothing was settled".
            raise SettlementPending(
                "the payment may have settled but could not be recorded yet; retry later",
                retry_after=PENDING_RETRY_AFTER,
            ) from None

    async def _submit(self, record: ChallengeRecord) -> ChallengeRecord | None:
        """Hand-over point: after this CAS the outcome is only ever read from the chain."""
        payment = record.payment
        assert payment is not None
        result = await self.transition(
            _settling_move(
                record,
                State.SETTLING,
                self.clock(),
                f"handed to settler {self.settler.name}",
                RecordChanges(payment=replace(payment, submitted=True, attempt_id=uuid4_hex())),
            )
        )
        return result.record if isinstance(result, TransitionApplied) else None

    async def _run_settler(
        self, request: SettlementRequest, hooks: _AttemptHooks
    ) -> SettlementOutcome:
        budget = max(1.0, self.lease_seconds - 2.0)
        try:
            return await asyncio.wait_for(self.settler.settle(request, hooks), budget)
        except TimeoutError:
            return Unknown("settlement did not finish within the lease")
        except Exception:
            # A settler must not raise; if it does it may have broadcast: treat as unknown.
            log.exception(
                "challenge %s: settler %s raised", request.challenge_id, self.settler.name
            )
            return Unknown("settler raised")

    async def _after_settlement(
        self, record: ChallengeRecord, outcome: SettlementOutcome, depth: int
    ) -> AccessResult:
        if isinstance(outcome, Settled):
            return await self._record_paid(record, outcome.tx_hash, outcome.payer, depth)
        if isinstance(outcome, Rejected):
            result = await self.transition(
                self._release(record, f"settlement failed: {outcome.reason}")
            )
            if isinstance(result, TransitionApplied):
                log.info(
                    "challenge %s: settlement rejected: %s", record.challenge_id, outcome.reason
                )
                raise PaymentFailed(outcome.reason, outcome.detail)
            return await self._after_lost_race(record, result, depth)
        log.warning(
            "challenge %s: settlement outcome unknown: %s", record.challenge_id, outcome.reason
        )
        current = await self._end_lease(record, outcome)
        return await self._dispatch(current, None, depth + 1)

    async def _end_lease(self, record: ChallengeRecord, outcome: Unknown) -> ChallengeRecord:
        """Unknown outcome: end this attempt's lease so the next request asks the chain."""
        payment = record.payment
        assert payment is not None
        ended = replace(
            payment,
            lease_until=self.clock(),
            broadcast_tx_hash=payment.broadcast_tx_hash or outcome.tx_hash,
        )
        result = await self.transition(
            _settling_move(
                record,
                State.SETTLING,
                self.clock(),
                f"outcome unknown: {outcome.reason}",
                RecordChanges(payment=ended),
            )
        )
        return _stored(result) or record

    async def _current(
        self, record: ChallengeRecord, result: TransitionResult | None
    ) -> ChallengeRecord:
        """The record as it is now, after a compare-and-set this request lost."""
        current = _stored(result) or await self.store.get_challenge(record.challenge_id)
        if current is None:
            raise InternalError()
        return current

    async def _after_lost_race(
        self, record: ChallengeRecord, result: TransitionResult | None, depth: int
    ) -> AccessResult:
        return await self._dispatch(await self._current(record, result), None, depth + 1)

    async def _record_paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str, depth: int
    ) -> AccessResult:
        result = await self.transition(self._paid(record, tx_hash, payer, "settled on-chain"))
        if isinstance(result, TxClaimed):
            log.error(
                "challenge %s: tx %s already belongs to challenge %s",
                record.challenge_id,
                tx_hash,
                result.owner,
            )
            raise TxAlreadyRedeemed("this transaction is already redeemed for another challenge")
        if isinstance(result, TransitionApplied):
            log.info("challenge %s: paid in %s", record.challenge_id, tx_hash)
            failpoint("after-paid")
            return await self._deliver(result.record, depth)
        return await self._after_lost_race(record, result, depth)

    async def resolve(self, record: ChallengeRecord) -> ChallengeRecord:
        """A SETTLING record nobody is settling any more: decide it, return it as it is now.

        Never submitted -> released (nothing left this server). Submitted -> the
        chain decides (SPEC 5.2); nothing is ever settled a second time. Safe to
        call concurrently and while an attempt is still in flight: every move is a
        compare-and-set on the attempt it saw.
        """
        payment = record.payment
        assert payment is not None
        request: TransitionRequest | None
        if not payment.submitted:
            request = self._release(record, "never handed to a settler; claim released")
        else:
            request = await self._verdict(record)
        if request is None:
            return record
        result = await self.transition(request)
        if isinstance(result, TransitionApplied):
            log.info("challenge %s: %s", record.challenge_id, request.reason)
            return result.record
        if isinstance(result, StateMismatch) and result.record is not None:
            return result.record
        log.error(
            "challenge %s: could not apply %s: %s", record.challenge_id, request.reason, result
        )
        return record

    def _release(self, record: ChallengeRecord, reason: str) -> TransitionRequest:
        """SETTLING -> PENDING with the payment claim released: nothing moved on-chain."""
        return _settling_move(
            record,
            State.PENDING,
            self.clock(),
            reason,
            RecordChanges(clear_payment=True),
            release_payment=True,
        )

    def _paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str, reason: str
    ) -> TransitionRequest:
        """SETTLING -> PAID, claiming the txHash that moved the payment."""
        tx_hash = tx_hash.lower()
        return _settling_move(
            record,
            State.PAID,
            self.clock(),
            reason,
            RecordChanges(tx_hash=tx_hash, payer=payer),
            claim_tx_hash=tx_hash,
        )

    async def _verdict(self, record: ChallengeRecord) -> TransitionRequest | None:
        """The move the chain justifies for a submitted attempt, or None while undecided."""
        payment = record.payment
        assert payment is not None
        if self.chain is None:
            return None
        try:
            verdict = await resolve_authorization(
                self.chain,
                asset=record.asset,
                payer=payment.payer,
                pay_to=record.pay_to,
                value=int(payment.value),
                nonce=payment.nonce,
                valid_before=payment.valid_before,
                tx_hint=payment.broadcast_tx_hash,
            )
        except ChainUnavailable as exc:
            log.warning("challenge %s: cannot resolve from chain: %s", record.challenge_id, exc)
            return None
        if isinstance(verdict, Transferred):
            return self._paid(
                record, verdict.tx_hash, payment.payer, "resolved from chain: transferred"
            )
        if isinstance(verdict, NotTransferred):
            return self._release(record, f"resolved from chain: {verdict.why}")
        return None

    # ------------------------------------------------------------ steps 10-11

    async def _deliver(self, record: ChallengeRecord, depth: int) -> AccessResult:
        delivered = await self.deliver(record)
        if delivered.state is State.DELIVERED:
            return self.offers.granted(delivered)
        return await self._dispatch(delivered, None, depth + 1)

    async def deliver(self, record: ChallengeRecord) -> ChallengeRecord:
        """Step 10 for a PAID record: issue, store the grant, PAID -> DELIVERED.

        Returns the record as it is now (DELIVERED, or whatever a concurrent
        request made of it). If the issuer fails the record stays PAID and
        ``CredentialPending`` is raised; calling again retries the issuer.
        """
        assert record.tx_hash is not None
        assert record.payer is not None
        plan = self.plans.get(record.plan_id)
        ttl = plan.token_ttl_seconds if plan else 3600
        try:
            credential = await self.issuer.issue(
                GrantRequest(
                    request_id=record.request_id,
                    challenge_id=record.challenge_id,
                    plan_id=record.plan_id,
                    resource_id=record.resource_id,
                    tx_hash=record.tx_hash,
                    payer=record.payer,
                    token_ttl_seconds=ttl,
                )
            )
        except ProblemError:
            raise
        except Exception as exc:
            # Our own errors carry secret-free messages; anything else only by type.
            why = str(exc) if isinstance(exc, X402SrvError) else type(exc).__name__
            log.error(
                "challenge %s: credential issuer %s failed: %s",
                record.challenge_id,
                self.issuer.name,
                why,
            )
            raise CredentialPending(
                "the payment was settled but the access credential could not be issued yet; "
                "retry the same request to receive it",
                retry_after=PENDING_RETRY_AFTER,
                extra={"challengeId": record.challenge_id, "txHash": record.tx_hash},
            ) from None
        failpoint("after-grant")
        result = await self.transition(
            TransitionRequest(
                challenge_id=record.challenge_id,
                expect=State.PAID,
                to=State.DELIVERED,
                at=self.clock(),
                reason="credential issued",
                changes=RecordChanges(grant=self.offers.grant(record, credential)),
            )
        )
        if isinstance(result, TransitionApplied):
            self.metrics.grant_issued()
            return result.record
        return await self._current(record, result)
