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
    PENDING record and answer 402 for it. Unpaid requests (discovery and
    challenges) count against the client's limit -> 429 RATE_LIMITED.
 3. Find the challenge: ``accepted.extra.challengeId``, else ``body.requestId``,
    else the challenge that already claimed this very payment, else none yet
    (a discovery-first purchase; its challenge is created in step 6).
 4. Answer from the record's state (``_step``, in a bounded loop: a lost
    compare-and-set re-reads the record and answers from its state now):
    DELIVERED -> the stored grant, PAID -> step 10, SETTLING -> the chain
    decides at once (SPEC 5.2), else 409 SETTLEMENT_IN_PROGRESS while a lease
    runs or 502 SETTLEMENT_PENDING after. A grant only on proof (SPEC 4.2,
    ``_proves``: the requestId, or the exact signed authorization stored); the
    chain is asked only for a proven caller or one with a valid payment of its own.
    EXPIRED/CANCELLED -> 410; PENDING past expiresAt -> EXPIRED, 410.
 5. Check the payment against the requirement this server offered
    (``protocol.check_payment``).                     -> 402 PAYMENT_FAILED
 6. Claim the payment ``(chainId, asset, from, nonce)`` and
 7. move PENDING -> SETTLING, both in ONE compare-and-set, before anything goes
    on-chain.          -> 409 TX_ALREADY_REDEEMED / 409 SETTLEMENT_IN_PROGRESS
 8. Mark the attempt submitted (a compare-and-set of its own), then settle with
    the configured strategy; the ids never leave with the payment
    (``protocol.for_third_parties``). Rejected: SETTLING -> PENDING and the
    claim released, 402. Unknown: the lease is ended, the record stays SETTLING
    and the chain decides (``settling.SettlingResolver``).
 9. Record the txHash (claimed atomically) and SETTLING -> PAID.
10. Take the delivery claim (PAID -> PAID), issue the credential once, and
    PAID -> DELIVERED with the grant stored. If the issuer fails the record
    stays PAID; a retry resumes here.
11. 200 with the AccessGrant and ``PAYMENT-RESPONSE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .chain import ChainReader
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
    IssuedCredential,
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
from .protocol import (
    AccessBody,
    PaymentPayload,
    check_payment,
    decode_payment_header,
    for_third_parties,
)
from .protocol import parse_access_body as parse_body
from .ratelimit import UnpaidLimiter
from .records import ChallengeRecord, PaymentDetails, PaymentKey, RecordChanges, State, Transition
from .settling import Paid, Release, SettlingResolver

__all__ = ["AccessPipeline", "AccessRequest", "AccessResult"]

log = logging.getLogger("x402srv.pipeline")

AccessResult = PaymentOffer | AccessGranted

#: Retry-After for an outcome that only the chain can tell.
PENDING_RETRY_AFTER = 5
#: How many states one request follows a record through (lost races) before giving up.
MAX_STEPS = 6
#: A delivery claim lives this long unless its holder renews it (every third of it)
#: while the issuer runs: a holder that crashed blocks the next request this long at most.
DELIVERY_LEASE_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class AccessRequest:
    """What the HTTP route hands over: raw bytes, two header values and the client's key."""

    body: bytes
    content_type: str | None
    payment_signature: str | None
    client: str | None = None


@dataclass(slots=True)
class _Caller:
    """Who asks, and what they can prove (SPEC 4.2, "A grant is a bearer credential")."""

    body: AccessBody
    payment: PaymentPayload | None = None
    key: PaymentKey | None = None
    #: The payment passed step 5 against this challenge's requirement: (challengeId, auth).
    checked: tuple[str, Authorization] | None = None
    #: Its signature verified against this challenge, window aside (a proof, not a payment).
    verified: tuple[str, Authorization] | None = None


def _same_authorization(auth: Authorization, stored: PaymentDetails) -> bool:
    """Byte for byte the authorization stored on the challenge (SPEC 4.2 proof)."""
    return (
        auth.payer.lower() == stored.payer.lower()
        and str(auth.value) == stored.value
        and auth.valid_after == stored.valid_after
        and auth.valid_before == stored.valid_before
        and auth.nonce.lower() == stored.nonce.lower()
        and auth.signature.lower() == stored.signature.lower()
    )


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
    """A move that only the attempt (settlement or delivery) which wrote it may make."""
    assert record.payment is not None
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=record.state,
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
        limiter: UnpaidLimiter | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or current_metrics()
        self.store = store
        self.settler = settler
        self.issuer = issuer
        self.chain = chain
        self.clock = clock
        self.limiter = limiter
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
        self.exclusive_issuer = bool(getattr(issuer, "exclusive", True))
        self.resolver = SettlingResolver(chain, clock)
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
        return await self.access(body, payment, client=request.client)

    async def access(
        self, body: AccessBody, payment: PaymentPayload | None, *, client: str | None = None
    ) -> AccessResult:
        """Steps 2-11 for an already-parsed request (HTTP, the gateway and A2A come here)."""
        plan_id = body.plan_id or (payment.extra_str("planId") if payment else None)
        if plan_id is None:
            if payment is not None:
                raise TierNotFound("no planId in the body or in accepted.extra.planId")
            await self.limit_unpaid(client)
            return self.offers.discovery
        plan = self.plans.get(plan_id)
        if plan is None:
            raise TierNotFound(f"no plan {plan_id[:64]!r}; POST {{}} lists the plans")
        if payment is None:
            await self.limit_unpaid(client)
            return await self._challenge(body, plan)
        return await self._settlement(body, plan, payment)

    async def limit_unpaid(self, client: str | None) -> None:
        """429 for a client over its unpaid-request limit; paying requests never come here."""
        if self.limiter is not None and client is not None:
            await self.limiter.check(client)

    async def _challenge(self, body: AccessBody, plan: Plan) -> AccessResult:
        body = replace(body, request_id=body.request_id or uuid4_str())
        assert body.request_id is not None
        created = await self.store.create_challenge(
            self._new_record(plan, body.request_id, body.resource_id, self.clock())
        )
        assert not isinstance(created, PaymentClaimed)
        record, was_created = created
        if was_created:
            # DEBUG, not INFO: anyone can send unpaid requests, and a line for each
            # would let them fill the disk (it was also a third of the cost of a
            # 402). Everything that follows a payment is logged at INFO.
            self._log_created(record, logging.DEBUG)
        self._same_request(record, body, plan)
        return await self._answer(record, _Caller(body))

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
        caller = _Caller(body, payment, key)
        record = await self._find_challenge(body, payment, key)
        if record is None:
            return await self._implicit_purchase(caller, plan)
        self._same_request(record, body, plan)
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
        # (from, nonce, signature) become public on-chain once settled: a replayed
        # payment alone may only reach a discovery-first purchase, and only while the
        # authorization is still valid. Everyone else uses their requestId.
        replay_window = record.payment.valid_before if record.payment else 0
        if not record.implicit or self.clock() > replay_window:
            raise TxAlreadyRedeemed(
                "this payment was already redeemed; fetch its grant with its requestId"
            )
        return record

    async def _implicit_purchase(self, caller: _Caller, plan: Plan) -> AccessResult:
        """A discovery-first purchase: check, then create the challenge already SETTLING.

        Nothing is stored before the payment passes step 5, and concurrent replays
        of one payment converge on a single challenge through the claim.
        """
        assert caller.payment is not None
        assert caller.key is not None
        now = self.clock()
        body = caller.body
        pending = self._new_record(
            plan, body.request_id or uuid4_str(), body.resource_id, now, implicit=True
        )
        offered = self.offers.offered_requirement(pending)
        auth = check_payment(caller.payment, offered, self.network, self.domain, now)
        settling = pending.apply(
            RecordChanges(payment=self._details(auth, caller.key, now)),
            State.SETTLING,
            now,
            "settlement started",
        )
        created = await self.store.create_challenge(settling, claim_payment=caller.key)
        if isinstance(created, PaymentClaimed):
            owner = await self.store.get_challenge(created.owner)
            if owner is None or not owner.implicit or owner.plan_id != plan.plan_id:
                raise TxAlreadyRedeemed("this payment is already used for another challenge")
            return await self._answer(owner, caller)
        record, was_created = created
        if not was_created:
            self._same_request(record, body, plan)
            return await self._answer(record, caller)
        caller.checked = caller.verified = (record.challenge_id, auth)
        self._log_created(record)
        failpoint("after-claim")
        return await self._answer(await self._settle(record, auth, caller.payment, offered), caller)

    # ------------------------------------------------------------ step 4

    async def _answer(self, start: ChallengeRecord | AccessResult, caller: _Caller) -> AccessResult:
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

    async def _step(
        self, record: ChallengeRecord, caller: _Caller
    ) -> AccessResult | ChallengeRecord:
        """One state's answer: a final result, or the record as it is now to look at again."""
        state = record.state
        if state is State.DELIVERED:
            self._prove(record, caller)
            return self.offers.granted(record)
        if state in (State.EXPIRED, State.CANCELLED):
            raise ChallengeExpired(f"challenge {record.challenge_id} is {state.value.lower()}")
        if state is State.PAID:
            self._prove(record, caller)
            return await self._deliver(record)
        if state is State.SETTLING:
            if not self._proves(record, caller):
                # Not its buyer, but a payment for this very challenge: it may ask the
                # chain (a stale attempt may be released and this one settled); any
                # grant that comes of it still needs the proof. Anything else: 402.
                self._checked(record, caller)
            return await self._settling(record)
        if self.clock() >= record.expires_at:
            current = await self.expire(record)
            if current.state is State.PENDING:  # the record is gone: nothing left to follow
                raise ChallengeExpired(f"challenge {record.challenge_id} expired")
            # EXPIRED answers 410 next; a payment claimed just before expiry is followed.
            return current
        if caller.payment is None:
            return self.offers.challenge(record, self.plans.get(record.plan_id))
        return await self._attempt(record, caller)

    def _proves(self, record: ChallengeRecord, caller: _Caller) -> bool:
        """Whether the caller proves it bought this challenge (SPEC 4.2).

        The proof is the requestId, or a payment whose signature verifies and
        whose authorization is byte for byte the stored one. A payment that
        does not even verify raises its 402 (what a fresh, invalid payment
        gets). Nothing here calls the chain.
        """
        if caller.body.request_id is not None and caller.body.request_id == record.request_id:
            return True
        stored = record.payment
        if caller.payment is None or stored is None:
            return False
        if caller.verified is None or caller.verified[0] != record.challenge_id:
            offered = self.offers.offered_requirement(record)
            auth = check_payment(
                caller.payment, offered, self.network, self.domain, self.clock(), window=False
            )
            caller.verified = (record.challenge_id, auth)
        return _same_authorization(caller.verified[1], stored)

    def _prove(self, record: ChallengeRecord, caller: _Caller) -> None:
        """Raise unless the caller proves the purchase: it never gets someone else's grant."""
        if not self._proves(record, caller):
            raise TxAlreadyRedeemed("this challenge is already paid, with another payment")

    def _checked(self, record: ChallengeRecord, caller: _Caller) -> Authorization:
        """Step 5 for the caller's payment against this challenge (cached per challenge)."""
        assert caller.payment is not None
        if caller.checked is None or caller.checked[0] != record.challenge_id:
            offered = self.offers.offered_requirement(record)
            auth = check_payment(caller.payment, offered, self.network, self.domain, self.clock())
            caller.checked = caller.verified = (record.challenge_id, auth)
        return caller.checked[1]

    async def _settling(self, record: ChallengeRecord) -> ChallengeRecord:
        """A proven caller's SETTLING record: the chain decides now, or the caller waits."""
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
        self, record: ChallengeRecord, caller: _Caller
    ) -> AccessResult | ChallengeRecord:
        assert caller.payment is not None
        assert caller.key is not None
        now = self.clock()
        offered = self.offers.offered_requirement(record)
        auth = self._checked(record, caller)
        result = await self.transition(
            TransitionRequest(
                challenge_id=record.challenge_id,
                expect=State.PENDING,
                to=State.SETTLING,
                at=now,
                reason="settlement started",
                changes=RecordChanges(payment=self._details(auth, caller.key, now)),
                claim_payment=caller.key,
            )
        )
        if isinstance(result, PaymentClaimed):
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
        return await self._settle(result.record, auth, caller.payment, offered)

    # ------------------------------------------------------------ steps 8-9

    async def _settle(
        self,
        record: ChallengeRecord,
        auth: Authorization,
        payment: PaymentPayload,
        offered: dict[str, object],
    ) -> AccessResult | ChallengeRecord:
        submitted = await self._submit(record)
        if not isinstance(submitted, TransitionApplied):
            return await self._current(record, submitted)
        record = submitted.record
        assert record.payment is not None
        request = SettlementRequest(
            challenge_id=record.challenge_id,
            attempt_id=record.payment.attempt_id,
            authorization=auth,
            payload=for_third_parties(payment.model_dump(mode="json", by_alias=True)),
            requirements=for_third_parties(offered),
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
            return await self._after_settlement(hooks.record, outcome)
        except StoreUnavailable:
            if isinstance(outcome, Rejected):
                raise  # nothing moved on-chain: a plain 503, retry later
            # The chain may already hold the transfer: never answer "nothing was settled".
            raise SettlementPending(
                "the payment may have settled but could not be recorded yet; retry later",
                retry_after=PENDING_RETRY_AFTER,
            ) from None

    async def _submit(self, record: ChallengeRecord) -> TransitionResult:
        """Hand-over point: after this CAS the outcome is only ever read from the chain."""
        payment = record.payment
        assert payment is not None
        return await self.transition(
            _settling_move(
                record,
                State.SETTLING,
                self.clock(),
                f"handed to settler {self.settler.name}",
                RecordChanges(payment=replace(payment, submitted=True, attempt_id=uuid4_hex())),
            )
        )

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
        self, record: ChallengeRecord, outcome: SettlementOutcome
    ) -> AccessResult | ChallengeRecord:
        if isinstance(outcome, Settled):
            return await self._record_paid(record, outcome.tx_hash, outcome.payer)
        if isinstance(outcome, Rejected):
            result = await self.transition(
                self._release(record, f"settlement failed: {outcome.reason}")
            )
            if isinstance(result, TransitionApplied):
                log.info(
                    "challenge %s: settlement rejected: %s", record.challenge_id, outcome.reason
                )
                raise PaymentFailed(outcome.reason, outcome.detail)
            return await self._current(record, result)
        log.warning(
            "challenge %s: settlement outcome unknown: %s", record.challenge_id, outcome.reason
        )
        return await self._end_lease(record, outcome)

    async def _end_lease(self, record: ChallengeRecord, outcome: Unknown) -> ChallengeRecord:
        """Unknown outcome: end this attempt's lease so the chain decides from now on."""
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

    async def _record_paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str
    ) -> AccessResult | ChallengeRecord:
        if self.chain is not None and not await self.resolver.settles_in(record, tx_hash):
            # A settler's word alone never grants access: what the chain does not show
            # (yet) is an unknown outcome, which the chain decides.
            log.warning("challenge %s: %s does not show this payment", record.challenge_id, tx_hash)
            return await self._end_lease(record, Unknown("the chain does not confirm the settler"))
        result = await self._mark_paid(record, tx_hash, payer, "settled on-chain")
        if isinstance(result, TxClaimed):
            log.error(
                "challenge %s: tx %s already belongs to challenge %s",
                record.challenge_id,
                tx_hash,
                result.owner,
            )
            # The settler's word is worth nothing now: end its lease, so the next retry or
            # reconciler pass asks the chain about this authorization at once.
            await self._end_lease(record, Unknown("the settler named another challenge's tx"))
            raise TxAlreadyRedeemed("this transaction is already redeemed for another challenge")
        if isinstance(result, TransitionApplied):
            log.info("challenge %s: paid in %s", record.challenge_id, tx_hash)
            failpoint("after-paid")
            return await self._deliver(result.record)
        return await self._current(record, result)

    async def _mark_paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str, reason: str
    ) -> TransitionResult:
        """SETTLING -> PAID, claiming the txHash; shared with other challenges only on proof.

        One transaction may settle several authorizations (a batching
        facilitator): when the txHash already belongs to another challenge, the
        chain must show THIS authorization used in it, and then the record is
        PAID without a claim of its own on the txHash (SPEC 5.2).
        """
        result = await self.transition(self._paid(record, tx_hash, payer, reason))
        if not isinstance(result, TxClaimed) or record.payment is None:
            return result
        if not await self.resolver.settles_in(record, tx_hash):
            return result
        shared = f"{reason}; transaction shared with challenge {result.owner}"
        return await self.transition(self._paid(record, tx_hash, payer, shared, claim=False))

    async def resolve(self, record: ChallengeRecord, *, grace: float = 0.0) -> ChallengeRecord:
        """A SETTLING record: let the chain decide it, and return it as it is now.

        Transferred -> PAID at once, whatever lease is running; nothing is ever
        settled a second time. Not transferred -> released only after the lease
        (plus ``grace``). Safe to call concurrently and while an attempt is still
        in flight: every move is a compare-and-set on the attempt it saw.
        """
        decision = await self.resolver.decide(record, grace=grace)
        if decision is None:
            return record
        if isinstance(decision, Paid):
            assert record.payment is not None
            result = await self._mark_paid(
                record, decision.tx_hash, record.payment.payer, decision.reason
            )
        else:
            assert isinstance(decision, Release)
            result = await self.transition(self._release(record, decision.reason))
        if isinstance(result, TransitionApplied | StateMismatch) and result.record is not None:
            return result.record
        log.error("challenge %s: could not apply %s: %s", record.challenge_id, decision, result)
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
        self, record: ChallengeRecord, tx_hash: str, payer: str, reason: str, *, claim: bool = True
    ) -> TransitionRequest:
        """SETTLING -> PAID; the settlement lease ends, so the delivery claim is free."""
        assert record.payment is not None
        tx_hash = tx_hash.lower()
        return _settling_move(
            record,
            State.PAID,
            self.clock(),
            reason,
            RecordChanges(
                tx_hash=tx_hash,
                payer=payer,
                payment=replace(record.payment, lease_until=self.clock()),
            ),
            claim_tx_hash=tx_hash if claim else None,
        )

    # ------------------------------------------------------------ steps 10-11

    async def _deliver(self, record: ChallengeRecord) -> AccessResult | ChallengeRecord:
        delivered = await self.deliver(record)
        if delivered.state is State.DELIVERED:
            return self.offers.granted(delivered)
        return delivered

    async def deliver(self, record: ChallengeRecord, *, wait: bool = True) -> ChallengeRecord:
        """Step 10 for a PAID record: issue, store the grant, PAID -> DELIVERED.

        Returns the record as it is now (DELIVERED, or whatever a concurrent
        request made of it). With an exclusive issuer only the holder of the
        delivery claim calls it; another request waits for that (``wait``) or
        leaves the record to it. If the issuer fails the record stays PAID, the
        claim is given back and ``CredentialPending`` is raised; calling again
        retries the issuer.
        """
        if self.exclusive_issuer:
            claimed = await self._claim_delivery(record)
            if claimed is None:
                return await self._await_delivery(record) if wait else record
            if claimed.state is not State.PAID:
                return claimed
            record = claimed
        credential = await self._issue(record)
        failpoint("after-grant")
        assert record.payment is not None
        result = await self.transition(
            TransitionRequest(
                challenge_id=record.challenge_id,
                expect=State.PAID,
                to=State.DELIVERED,
                at=self.clock(),
                reason="credential issued",
                changes=RecordChanges(grant=self.offers.grant(record, credential)),
                attempt_id=record.payment.attempt_id if self.exclusive_issuer else None,
            )
        )
        if isinstance(result, TransitionApplied):
            self.metrics.grant_issued()
            return result.record
        return await self._current(record, result)

    async def _issue(self, record: ChallengeRecord) -> IssuedCredential:
        """The issuer's credential; a claim held meanwhile is renewed until it answers."""
        renewing = (
            asyncio.get_running_loop().create_task(self._renew_delivery(record))
            if self.exclusive_issuer
            else None
        )
        try:
            return await self.issuer.issue(self._grant_request(record))
        except ProblemError:
            await self._give_back_delivery(record)
            raise
        except Exception as exc:
            await self._give_back_delivery(record)
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
        finally:
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing

    def _grant_request(self, record: ChallengeRecord) -> GrantRequest:
        assert record.tx_hash is not None
        assert record.payer is not None
        plan = self.plans.get(record.plan_id)
        return GrantRequest(
            request_id=record.request_id,
            challenge_id=record.challenge_id,
            plan_id=record.plan_id,
            resource_id=record.resource_id,
            tx_hash=record.tx_hash,
            payer=record.payer,
            token_ttl_seconds=plan.token_ttl_seconds if plan else 3600,
        )

    async def _claim_delivery(self, record: ChallengeRecord) -> ChallengeRecord | None:
        """PAID -> PAID with a fresh attempt: the record (claimed, or as it is now), or
        None while another request holds an unexpired claim."""
        payment = record.payment
        assert payment is not None
        now = self.clock()
        if payment.lease_until > now:
            return None
        claim = replace(payment, attempt_id=uuid4_hex(), lease_until=now + DELIVERY_LEASE_SECONDS)
        result = await self.transition(
            _settling_move(
                record, State.PAID, now, "issuing the credential", RecordChanges(payment=claim)
            )
        )
        if isinstance(result, TransitionApplied):
            return result.record
        current = await self._current(record, result)
        if current.state is State.PAID:
            return None  # another request claimed it first
        return current

    async def _renew_delivery(self, record: ChallengeRecord) -> None:
        """Keep our claim alive while the issuer runs (a crash lets it lapse within seconds).

        Renewals are compare-and-sets on our attempt (each one a history entry,
        a few per slow callback); one that fails means the claim is gone, and
        renewing stops.
        """
        assert record.payment is not None
        while True:
            await asyncio.sleep(DELIVERY_LEASE_SECONDS / 3)
            renewed = replace(record.payment, lease_until=self.clock() + DELIVERY_LEASE_SECONDS)
            try:
                result = await self.store.transition(
                    _settling_move(
                        record,
                        State.PAID,
                        self.clock(),
                        "issuing the credential",
                        RecordChanges(payment=renewed),
                    )
                )
            except StoreUnavailable:
                continue
            if not isinstance(result, TransitionApplied):
                return

    async def _give_back_delivery(self, record: ChallengeRecord) -> None:
        """The issuer failed: end our claim so the next retry need not wait for it."""
        if not self.exclusive_issuer:
            return
        assert record.payment is not None
        ended = replace(record.payment, lease_until=self.clock())
        with contextlib.suppress(StoreUnavailable):  # else the claim simply runs out
            await self.transition(
                _settling_move(
                    record,
                    State.PAID,
                    self.clock(),
                    "credential issuer failed",
                    RecordChanges(payment=ended),
                )
            )

    async def _await_delivery(self, record: ChallengeRecord) -> ChallengeRecord:
        """Another request is issuing this credential: wait for it, or for its claim to lapse."""
        delay = 0.01
        while True:
            current = await self.store.get_challenge(record.challenge_id)
            if current is None:
                raise InternalError()
            if current.state is not State.PAID:
                return current
            assert current.payment is not None
            if current.payment.lease_until <= self.clock():
                return current  # the claim ran out (or was given back): take it over
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
