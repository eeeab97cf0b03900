"""The fixed access flow of POST /x402/access (docs/protocol/flow.md). Plugins cannot reorder it.

Every request goes through these steps in this order; a failing step answers at
once and nothing after it runs. Bad input fails before step 6, so it never
reaches the store's write path or the chain. Each step's work is in the module
of ``x402srv/access/`` named beside it; this one only puts them in order.

 0. Parse the body: a JSON object of at most 64 KiB.  -> 400/415 INVALID_REQUEST
 1. Decode ``PAYMENT-SIGNATURE`` if present.          -> 400 INVALID_REQUEST
 2. Resolve the plan: ``body.planId``, else ``accepted.extra.planId``. None and
    no payment: *discovery*, every plan. Unknown -> 400 TIER_NOT_FOUND. No
    payment: a *challenge*, created (or found by requestId) PENDING
    (``new_challenge``). Unpaid requests count against the client's limit,
    and so does a payment that fails (step 5 or 8: its 402 becomes the 429
    past it).                                          -> 429 RATE_LIMITED
    A *top-up* (``body.topUp``, or the gateway's token) first finds the grant it
    names (``top_ups.find_grant``: delivered, sells calls, not expired) and
    binds it into the challenge it creates; a request whose challenge is bound
    to another grant (or to none) is 409 REQUEST_ID_CONFLICT.
    A *sign-in* (``SIGN-IN-WITH-X``, no payment, no top-up) by a wallet that
    holds a live grant of the plan (discovery: of any plan) on the resource
    answers that grant, as a DELIVERED record does (``sign_in``); a wallet
    without one gets the 402.  -> 400 SIWX_INVALID, 403 SIWX_REJECTED,
                                   409 SIWX_NONCE_USED, 503 SIWX_UNAVAILABLE
 3. Find the challenge: ``accepted.extra.challengeId``, else ``body.requestId``,
    else the one that claimed this very payment (``find_challenge``), else none
    yet (a discovery-first purchase: its challenge is created, already
    SETTLING, once the payment passes step 5: ``implicit_purchase``).
 4. Answer from the record's state (``_step``), in a bounded loop: a lost
    compare-and-set re-reads the record and answers from its state now.
    DELIVERED -> the grant (410 GRANT_REVOKED once the seller revoked it),
    PAID -> step 10, both only on proof (``proof``); OWED (a top-up its
    grant can no longer use, or a purchase not delivered in time: refunds)
    -> 410 GRANT_REVOKED naming the owed payment (GRANT_REFUNDED once refunded);
    SETTLING -> the chain decides at once (``recovery``), else 409 while a
    lease runs, 502 after (``settle_step``); EXPIRED/CANCELLED -> 410;
    PENDING past expiresAt -> 410; PENDING sent again a payment it gave back
    (step 8) -> only on proof, else 409 TX_ALREADY_REDEEMED.
 5. Check the payment against the requirement this server offered (the one
    of the challenge's offers it claims: network, token, that token's amount
    and EIP-712 domain: ``payment_check``).           -> 402 PAYMENT_FAILED
 6. Claim the payment ``(chainId, asset, from, nonce)`` and
 7. move PENDING -> SETTLING, both in ONE compare-and-set, before anything goes
    on-chain (``claim_payment``).
                       -> 409 TX_ALREADY_REDEEMED / 409 SETTLEMENT_IN_PROGRESS
 8. Mark the attempt submitted (its own compare-and-set), then settle with the
    settler of the payment's network (``settlement.per_network``: its
    failover, when it has several), our ids removed
    (``protocol.for_third_parties``). Rejected: SETTLING -> PENDING, the claim
    kept by the challenge, 402; 503 SETTLER_UNAVAILABLE (+ Retry-After) when no
    settler could be reached; but "nonce already used" is the chain's to decide.
    Unknown: the lease ends and the chain decides (step 4 again).
 9. Confirm the settler's transaction on-chain (when there is an RPC), claim
    its txHash and move SETTLING -> PAID with the payer of the authorization
    checked in step 5 (never a settler's word for it). Steps 8-9: ``settle_step``.
10. Issue the credential, credit the calls of a plan that sells them, and PAID
    -> DELIVERED (``delivery``); a top-up only credits its grant, or moves PAID
    -> OWED when that grant was revoked or expired meanwhile. If the issuer
    fails the record stays PAID; a retry resumes here.
11. 200 with the AccessGrant and ``PAYMENT-RESPONSE``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from x402srv.access import moves
from x402srv.access.claim_payment import PaymentClaimer
from x402srv.access.delivery import DELIVERY_LEASE_SECONDS, Delivery
from x402srv.access.find_challenge import find_challenge
from x402srv.access.given_back import KeptPayments, kept_payment
from x402srv.access.ids import uuid4_str
from x402srv.access.implicit_purchase import ImplicitPurchase
from x402srv.access.new_challenge import ChallengeMaker, same_purchase
from x402srv.access.payment_check import PaymentCheck, payment_key, sent_payment
from x402srv.access.payment_ids import PaymentIds
from x402srv.access.progress import AccessResult, Caller, Claimed, Next, SentPayment
from x402srv.access.proof import PurchaseProof, replays
from x402srv.access.records import ChallengeRecord, State
from x402srv.access.recovery import SettlingResolver
from x402srv.access.settle_step import PENDING_RETRY_AFTER, SettleStep
from x402srv.access.sign_in import SignIn
from x402srv.access.top_ups import find_grant
from x402srv.config.models import Config, Plan
from x402srv.errors import (
    ChallengeExpired,
    CredentialPending,
    GrantRevoked,
    NotFound,
    PaymentFailed,
    RateLimited,
    SettlementInProgress,
    SiwxInvalid,
    SiwxRejected,
    TierNotFound,
    TxAlreadyRedeemed,
)
from x402srv.interfaces import (
    Clock,
    CredentialIssuer,
    Settler,
    Store,
    TransitionRequest,
    TransitionResult,
    system_clock,
)
from x402srv.refunds.answers import refunded_answer
from x402srv.server.metrics import Metrics
from x402srv.server.metrics import current as current_metrics
from x402srv.settlement.chain import ChainReader
from x402srv.usage.counters import Counters
from x402srv.usage.unpaid_limit import UnpaidLimiter
from x402srv.wire.offers import AccessGranted, OfferBuilder
from x402srv.wire.protocol import AccessBody, PaymentPayload, decode_payment_header
from x402srv.wire.protocol import parse_access_body as parse_body
from x402srv.wire.siwx import access_scope

__all__ = [
    "DELIVERY_LEASE_SECONDS",
    "MAX_STEPS",
    "PENDING_RETRY_AFTER",
    "AccessPipeline",
    "AccessRequest",
    "AccessResult",
    "payment_key",
]

log = logging.getLogger("x402srv.access.pipeline")

#: How many states one request follows a record through (lost races) before giving up.
MAX_STEPS = 6


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
    sign_in: str | None = None  # ``SIGN-IN-WITH-X``


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
        counters: Counters | None = None,
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
        self.offers = OfferBuilder(config, clock=clock)
        self.plans = config.plan_map  # a pydantic private attribute: slow to reach per request
        self.network = config.network_info  # the first network's first token
        self.mover = moves.Mover(store, clock)
        self.observers = self.mover.observers  # see every applied transition (A2A streams)
        # The counters (``[analytics]``): a dict increment per event, flushed in the background.
        self.counters = counters or Counters(
            store, clock, keep_seconds=config.analytics.keep_days * 86_400
        )
        self.observers.append(self.counters.observe)
        # The steps, in the order of the module docstring.
        lease_seconds = config.settlement.lease_seconds
        counters = self.counters
        self.challenges = ChallengeMaker(config, store, clock, self.metrics, counters)  # 2
        payments = PaymentCheck(self.offers, clock)  # 5
        self.proof = PurchaseProof(payments)  # 4
        #: Buyers' idempotency keys (payment-identifier), bound just before the claim.
        self.payment_ids = PaymentIds(
            store,
            clock,
            required=config.payment_identifier.required,
            keep_seconds=config.reconciler.retention_days * 86_400,
        )
        self.claimer = PaymentClaimer(  # 5-7
            payments, self.mover, clock, counters, lease_seconds, self.payment_ids
        )
        self.implicit = ImplicitPurchase(  # 3, its last way
            store, self.challenges, self.claimer, self.proof, counters
        )
        self.resolver = SettlingResolver(self.chains, self.mover, clock)  # 4, SETTLING
        #: PENDING records holding a payment a settler gave back (4, PENDING).
        self.kept = KeptPayments(self.resolver, self.mover, clock)
        self.delivery = Delivery(  # 10
            self.mover, issuer, self.offers, self.plans, self.metrics, clock
        )
        #: Access again without paying (docs/sign-in-with-x.md): step 2's sign-in.
        self.sign_in = SignIn(config, store, clock, self.chains)
        self.settlement = SettleStep(  # 8-9
            settler=settler,
            mover=self.mover,
            resolver=self.resolver,
            delivery=self.delivery,
            offers=self.offers,
            clock=clock,
            metrics=self.metrics,
            counters=counters,
            lease_seconds=lease_seconds,
        )

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
        return await self.access(body, payment, client=request.client, sign_in=request.sign_in)

    async def access(
        self,
        body: AccessBody,
        payment: PaymentPayload | None,
        *,
        client: str | None = None,
        top_up_of: str | None = None,
        sign_in: str | None = None,
    ) -> AccessResult:
        """Steps 2-11 for an already-parsed request (HTTP, the gateway and A2A come here).

        ``top_up_of`` (the gateway, for a token it verified) names the grant a
        payment tops up by its challengeId; a body names it by requestId (``topUp``).
        A payment that fails counts against ``client``'s unpaid-request limit, and
        so does one already used for another purchase (a copy of a mined payment
        costs a signature check and a store read, and anyone can make one).
        """
        try:
            return await self._access(body, payment, client, top_up_of, sign_in)
        except (PaymentFailed, TxAlreadyRedeemed):
            await self.limit_failed(client)
            raise

    async def _access(
        self,
        body: AccessBody,
        payment: PaymentPayload | None,
        client: str | None,
        top_up_of: str | None,
        sign_in: str | None,
    ) -> AccessResult:
        plan_id = body.plan_id or (payment.extra_str("planId") if payment else None)
        if body.top_up is not None or top_up_of is not None:
            return await self._top_up(body, payment, plan_id, top_up_of, client)
        if plan_id is None:
            if payment is not None:
                raise TierNotFound("no planId in the body or in accepted.extra.planId")
            if sign_in is not None and (granted := await self._signed_in(sign_in, body, client)):
                return granted
            await self.limit_unpaid(client)
            return self.offers.discovery(resource_id=body.resource_id)
        plan = self.plans.get(plan_id)
        if plan is None:
            raise TierNotFound(f"no plan {plan_id[:64]!r}; POST {{}} lists the plans")
        if payment is None:
            if sign_in is not None and (granted := await self._signed_in(sign_in, body, client)):
                return granted
            await self.limit_unpaid(client)
            return await self._challenge(body, plan)
        return await self._settlement(body, plan, payment)

    async def _signed_in(
        self, header: str, body: AccessBody, client: str | None
    ) -> AccessGranted | None:
        """Step 2's sign-in: the wallet's live grant in scope again, or None (the 402)."""
        try:
            signed = await self.sign_in.check(
                header,
                scope=access_scope(body.plan_id, body.resource_id),
                uri=self.config.access_url,
            )
        except (SiwxInvalid, SiwxRejected):
            await self.limit_failed(client)  # a made-up sign-in costs a check, like a payment
            raise
        plans = None if body.plan_id is None else (body.plan_id,)
        record = await self.sign_in.grant(signed, plans, body.resource_id)
        if record is None:
            return None
        await self.sign_in.use(signed)  # once, across instances: 409 for a replay
        return self.offers.granted(record)

    async def limit_unpaid(self, client: str | None) -> None:
        """429 for a client over its unpaid-request limit; paying requests never come here.

        Every unpaid request passes here (discovery, challenges, the gateway's 402s,
        A2A calls without a payment), so this is where the counters count them.
        """
        self.counters.add("unpaid")
        await self.limit_failed(client)  # the one limit, whatever made the request unpaid

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
                self.counters.add("limited")
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
        try:
            grant = await find_grant(
                self.store,
                self.plans,
                request_id=body.top_up,
                challenge_id=top_up_of if body.top_up is None else None,
                plan_id=plan_id,
                now=self.clock(),
            )
        except GrantRevoked:
            owed = await self._owed_top_up(body)
            if owed is None:
                raise
            # The buyer asks again for a top-up its revoked grant never got: what became of
            # its own payment answers (owed, or refunded with the refund's txHash), on proof.
            sent = sent_payment(payment) if payment is not None else None
            return await self._answer(owed, Caller(body, sent))
        plan = self.plans[grant.plan_id]
        if payment is None:
            return await self._challenge(body, plan, grant)
        return await self._settlement(body, plan, payment, grant)

    async def _owed_top_up(self, body: AccessBody) -> ChallengeRecord | None:
        """The OWED top-up the body's own ``requestId`` names, if it names one."""
        if body.request_id is None:
            return None
        record = await self.store.get_by_request_id(body.request_id)
        if record is None or record.top_up_of is None or record.state is not State.OWED:
            return None
        return record

    async def _challenge(
        self, body: AccessBody, plan: Plan, grant: ChallengeRecord | None = None
    ) -> AccessResult:
        request_id = body.request_id
        if request_id is None:
            request_id = uuid4_str()
            body = body.with_request_id(request_id)
        record = await self.challenges.open(body, request_id, plan, grant)
        return await self._answer(record, Caller(body))

    # ------------------------------------------------------------ step 3

    async def _settlement(
        self,
        body: AccessBody,
        plan: Plan,
        payload: PaymentPayload,
        grant: ChallengeRecord | None = None,
    ) -> AccessResult:
        self.payment_ids.read(payload)  # 400 before anything is stored
        payment = sent_payment(payload)
        caller = Caller(body, payment)
        record = await find_challenge(self.store, body, payment)
        if record is None:
            started = await self.implicit.start(caller, payment, plan, grant)  # step 3's last way
            return await self._answer(started, caller)
        if replays(record, payment.key) and not kept_payment(record):
            # Found by this very payment (step 3's third way) or named by a caller
            # that replays it: the payment must prove the purchase before anything
            # about it is answered (402 or 409 otherwise, as for a fresh payment).
            # (A payment given back is a PENDING record's: ``_step`` asks for proof.)
            self.proof.prove(record, caller)
        same_purchase(record, body, plan, grant)
        return await self._answer(record, caller)

    # ------------------------------------------------------------ step 4

    async def _answer(
        self, start: ChallengeRecord | Claimed | AccessResult, caller: Caller
    ) -> AccessResult:
        """Follow the record through its states until one of them answers."""
        current = await self.settlement.settle(start) if isinstance(start, Claimed) else start
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
            self.proof.prove(record, caller)
            if record.revoked_at is not None:
                # A grant revoked because its money went back says so (docs/refunds.md).
                raise await refunded_answer(self.store, record.challenge_id) or GrantRevoked(
                    f"the grant of challenge {record.challenge_id} was revoked by the seller"
                )
            return self.offers.granted(record)
        if state in (State.EXPIRED, State.CANCELLED):
            raise ChallengeExpired(f"challenge {record.challenge_id} is {state.value.lower()}")
        if state is State.OWED:
            self.proof.prove(record, caller)
            raise await refunded_answer(self.store, record.challenge_id) or GrantRevoked(
                "the grant this top-up was for was revoked or expired before the top-up "
                f"could be credited; its payment ({record.tx_hash}) is recorded as owed to you"
                if record.top_up_of is not None
                else "the access credential could not be issued in time; its payment "
                f"({record.tx_hash}) is recorded as owed to you"
            )
        if state is State.PAID:
            self.proof.prove(record, caller)
            return await self.delivery.answer(record)  # step 10
        if state is State.SETTLING:
            if not self.proof.proves(record, caller):
                if caller.payment is not None:
                    self.claimer.payments.check(record, caller.payment)  # 402 if invalid
                if not self.proof.knows_request_id(record, caller):
                    # Only the buyer (its requestId, with a fresh authorization of its
                    # own) has the chain decide a stale attempt; a grant still needs the
                    # proof. Anyone else holding the challengeId could make us read the
                    # chain at will with payments of its own.
                    self.settlement.wait(record)
            return await self.settlement.settling(record)
        kept = kept_payment(record)  # a payment a settler gave back, still watched
        if self.clock() >= record.expires_at:
            # Past expiresAt: only its buyer has the chain asked about a kept payment
            # (anyone may hold a copy); the reconciler asks for everyone else.
            if kept and not self.proof.proves(record, caller):
                raise ChallengeExpired(f"challenge {record.challenge_id} expired")
            current = await self.expire(record)
            if current.state is State.PENDING:
                raise ChallengeExpired(f"challenge {record.challenge_id} expired")
            if kept:  # its buyer, proved above: the grant on the transfer the chain showed
                return await self._granted_on(current)
            return current  # EXPIRED answers 410 next; a payment claimed just before is followed
        if caller.payment is None:
            return self.offers.challenge(record, self.plans.get(record.plan_id))
        if (kept or await self._given_back(record, caller.payment)) and not self.proof.proves(
            record, caller
        ):
            # A settler saw it, so anyone may hold a copy: only the buyer sends it again.
            raise TxAlreadyRedeemed(
                "this payment was sent for this purchase before; send it again with the "
                "purchase's requestId, or sign a new payment"
            )
        if kept:
            looked = await self.kept.look(record)
            if isinstance(looked, ChallengeRecord):
                # The payment given back was transferred: no new one is taken.
                return await self._granted_on(looked)
        claimed = await self.claimer.claim(record, caller.payment)  # steps 5-7
        if isinstance(claimed, Claimed):
            return await self.settlement.settle(claimed)  # steps 8-9
        return claimed

    async def _granted_on(self, record: ChallengeRecord) -> Next:
        """The grant of a record the chain moved on the payment it kept, for its buyer.

        The caller proved the PENDING purchase (its requestId), whichever payment it
        sent now: a new one is not the stored authorization, so the PAID and DELIVERED
        steps' proof would refuse it (docs/protocol/states.md, "A payment given back").
        """
        if record.state is State.PAID:
            return await self.delivery.answer(record)  # step 10
        if record.state is State.DELIVERED and record.revoked_at is None:
            return self.offers.granted(record)
        return record

    async def _given_back(self, record: ChallengeRecord, payment: SentPayment) -> bool:
        """Whether this PENDING challenge held ``payment`` before and gave it back.

        A settler refused it, or none could take it (``moves.release``): the claim
        stayed with the challenge, so no other purchase takes it, and this one takes
        it again only on proof (docs/protocol/proof.md). Only a challenge that was
        SETTLING before can have held one.
        """
        if all(step.state is not State.SETTLING for step in record.history):
            return False
        owner = await self.store.get_by_payment(payment.key)
        return owner is not None and owner.challenge_id == record.challenge_id

    # ------------------------------------------------------------ for the reconciler, operators

    async def resolve(self, record: ChallengeRecord, *, grace: float = 0.0) -> ChallengeRecord:
        """A SETTLING record decided from the chain (``recovery``); the reconciler's too."""
        return await self.resolver.resolve(record, grace=grace)

    async def expire(self, record: ChallengeRecord) -> ChallengeRecord:
        """PENDING past expiresAt -> EXPIRED; returns the record as it is now.

        One that kept a payment given back expires only once the chain shows that
        payment can no longer move; it is PAID instead if the chain shows it moved
        (``x402srv.access.given_back``).
        """
        return await self.kept.end(record, State.EXPIRED, "expired before payment")

    async def cancel(self, challenge_id: str, reason: str) -> tuple[ChallengeRecord, bool]:
        """PENDING -> CANCELLED (an operator): the record as it is now, and whether it is
        CANCELLED by this call; ``NotFound`` without one.

        A record in another state is answered as it is. One still PENDING
        (``cancel_waits`` says why) kept a payment that may still move: cancelled, a
        transfer made after would pay for nothing. PAID if the chain shows that
        payment moved (delivered then, as the reconciler would).
        """
        record = await self.store.get_challenge(challenge_id)
        if record is None:
            raise NotFound(f"no challenge {challenge_id}")
        if record.state is not State.PENDING:
            return record, False
        current = await self.kept.end(record, State.CANCELLED, reason)
        if current.state is State.PAID:
            with contextlib.suppress(CredentialPending):  # (the reconciler delivers it then)
                current = await self.deliver(current, wait=False)
        return current, current.state is State.CANCELLED

    async def deliver(self, record: ChallengeRecord, *, wait: bool = True) -> ChallengeRecord:
        """Step 10 for a PAID record (``delivery``); the reconciler's too."""
        return await self.delivery.deliver(record, wait=wait)
