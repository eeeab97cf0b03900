"""Steps 8-9: settle a claimed payment, confirm it on-chain, and record it PAID.

    8  the attempt is marked submitted (its own compare-and-set; the settler's
       ``precheck``, a read, runs meanwhile when it has one), then the
       settler of the payment's network settles it, our ids removed
       (``protocol.for_third_parties``). Rejected: SETTLING -> PENDING, the claim
       kept by the challenge, 402 (503 SETTLER_UNAVAILABLE when no settler could be
       reached);
       "nonce already used" is the chain's to decide. Unknown: the lease ends
       and the chain decides (step 4 again).
    9  the settler's transaction is confirmed on-chain (when there is an RPC),
       its txHash claimed, and SETTLING -> PAID with the payer of the
       authorization checked in step 5 (never a settler's word for it); then
       step 10 (``delivery``).

``settling`` is step 4's answer for a SETTLING record: the chain decides at
once, else 409 while a lease runs and 502 after it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import NoReturn

from x402srv.access import moves
from x402srv.access.delivery import Delivery
from x402srv.access.failpoints import failpoint
from x402srv.access.ids import uuid4_hex
from x402srv.access.progress import Claimed, Next
from x402srv.access.records import ChallengeRecord, State
from x402srv.access.recovery import SettlingResolver
from x402srv.errors import (
    PaymentFailed,
    SettlementInProgress,
    SettlementPending,
    SettlerUnavailable,
    StoreUnavailable,
    TxAlreadyRedeemed,
)
from x402srv.interfaces import (
    Clock,
    Rejected,
    Settled,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    TransitionApplied,
    TxClaimed,
    Unknown,
)
from x402srv.server.metrics import Metrics
from x402srv.settlement.chain import ChainUnavailable
from x402srv.settlement.per_network import NoPrecheck, Precheck, precheck_of
from x402srv.settlement.verdicts import NotTransferred, Transferred
from x402srv.usage.counters import Counters
from x402srv.wire.offers import OfferBuilder
from x402srv.wire.protocol import for_third_parties
from x402srv.wire.reasons import Reason

__all__ = ["PENDING_RETRY_AFTER", "SETTLER_RETRY_AFTER", "SettleStep"]

log = logging.getLogger("x402srv.access.pipeline")

#: Retry-After for an outcome that only the chain can tell.
PENDING_RETRY_AFTER = 5
#: Retry-After when no settler could be reached (a restarting facilitator, a breaker cooling).
SETTLER_RETRY_AFTER = 10
#: A settler's ``precheck`` of one request, running (``SettleStep._precheck``).
PrecheckTask = asyncio.Task[SettlementOutcome | None]
#: What the counters count a payment turned away by a settler outage as.
SETTLER_UNAVAILABLE_REASON = "settler_unavailable"


@dataclass(frozen=True, slots=True)
class SettleStep:
    settler: Settler
    mover: moves.Mover
    resolver: SettlingResolver
    delivery: Delivery
    offers: OfferBuilder
    clock: Clock
    metrics: Metrics
    counters: Counters
    lease_seconds: float
    _prechecker: Precheck | None = field(init=False, repr=False, compare=False)

    async def settle(self, claimed: Claimed) -> Next:
        """Steps 8-9 (and 10 once PAID) for a challenge this request claimed."""
        record, payment = claimed.record, claimed.payment
        assert record.payment is not None  # SETTLING: the claim stored it
        handed = replace(record.payment, submitted=True, attempt_id=uuid4_hex())
        request = SettlementRequest(
            challenge_id=record.challenge_id,
            attempt_id=handed.attempt_id,
            authorization=payment.authorization,
            payload=for_third_parties(payment.payload.model_dump(mode="json", by_alias=True)),
            requirements=for_third_parties(self.offers.offered_requirement(record)),
            network=payment.option,
        )
        # The settler's check of the transfer (a read: nothing leaves) runs while the
        # hand-over is written; nothing is sent before that write applied.
        prechecking = self._precheck(request)
        reason = f"handed to settler {self.settler.name}"
        try:
            submitted = await self.mover.apply(moves.note(record, self.clock(), reason, handed))
        except BaseException:
            _drop(prechecking)
            raise
        if not isinstance(submitted, TransitionApplied):
            _drop(prechecking)
            return await self.mover.current(record, submitted)
        record = submitted.record
        log.info(
            "challenge %s: settling on %s with %s",
            record.challenge_id,
            record.network,
            self.settler.name,
        )
        hooks = moves.AttemptHooks(self.mover, record)
        started = time.perf_counter()
        outcome = await self._run_settler(request, hooks, prechecking)
        elapsed, outcome_name = time.perf_counter() - started, type(outcome).__name__.lower()
        self.metrics.settlement(self.settler.name, outcome_name, elapsed)
        # (the console keeps a refused payment, the buyer's doing, apart from a settler failing)
        buyer_side = isinstance(outcome, Rejected) and not outcome.settler_failed
        self.counters.settler(self.settler.name, "refused" if buyer_side else outcome_name, elapsed)
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

    async def settling(self, record: ChallengeRecord) -> ChallengeRecord:
        """Step 4 for a SETTLING record: the chain decides it now, or the caller waits."""
        current = await self.resolver.resolve(record)
        if current.state is not State.SETTLING:
            return current
        self.wait(current)

    def wait(self, record: ChallengeRecord) -> NoReturn:
        """The answer to a caller of a SETTLING record the chain did not decide: come back."""
        assert record.payment is not None  # SETTLING: the claim stored it
        left = record.payment.lease_until - self.clock()
        if left > 0:
            raise SettlementInProgress(
                "this challenge is being settled now", retry_after=min(math.ceil(left), 30)
            )
        raise SettlementPending(
            "the chain has not shown the outcome of this payment yet; retry the same request later",
            retry_after=PENDING_RETRY_AFTER,
        )

    def __post_init__(self) -> None:
        # Looked up once (a plugin's plain-function precheck: said once, never run).
        object.__setattr__(self, "_prechecker", precheck_of(self.settler, warn=True))

    def _precheck(self, request: SettlementRequest) -> PrecheckTask | None:
        """The settler's optional ``precheck`` of ``request``, started now; None without one."""
        if self._prechecker is None:
            return None
        return asyncio.ensure_future(self._prechecker(request))

    async def _run_settler(
        self,
        request: SettlementRequest,
        hooks: moves.AttemptHooks,
        prechecking: PrecheckTask | None,
    ) -> SettlementOutcome:
        try:
            settling = self._settled(request, hooks, prechecking)
            return await asyncio.wait_for(settling, max(1.0, self.lease_seconds - 2.0))
        except TimeoutError:
            return Unknown("settlement did not finish within the lease")
        except Exception:
            # A settler must not raise; if it does it may have broadcast: treat as unknown.
            log.exception(
                "challenge %s: settler %s raised", request.challenge_id, self.settler.name
            )
            return Unknown("settler raised")

    async def _settled(
        self,
        request: SettlementRequest,
        hooks: moves.AttemptHooks,
        prechecking: PrecheckTask | None,
    ) -> SettlementOutcome:
        """The precheck's refusal, else what the settler did with the payment."""
        if prechecking is not None:
            try:
                refused = await prechecking
            except NoPrecheck:
                pass  # (this network's settler has none: it checks as it settles)
            except Exception as exc:  # it could not tell: the settler checks another way
                # (ChainUnavailable never names the RPC URL; another error only its type)
                said = str(exc) if isinstance(exc, ChainUnavailable) else type(exc).__name__
                log.warning(
                    "challenge %s: %s could not check the payment before settling (%s); "
                    "it settles checking another way",
                    request.challenge_id,
                    self.settler.name,
                    said,
                )
                request = replace(request, precheck_failed=True)
            else:
                if refused is not None:
                    return refused  # the token refuses it, or it was paid already
                request = replace(request, prechecked=True)
        return await self.settler.settle(request, hooks)

    async def _after_settlement(self, record: ChallengeRecord, outcome: SettlementOutcome) -> Next:
        if isinstance(outcome, Rejected) and outcome.reason == Reason.NONCE_USED:
            outcome = await self._used_already(record, outcome)
        if isinstance(outcome, Settled):
            # Who paid is whoever signed the authorization checked in step 5, whatever
            # a settler says (a facilitator's "payer" is its word, not the chain's).
            assert record.payment is not None  # SETTLING: the claim stored it
            return await self._record_paid(
                record, outcome.tx_hash, record.payment.payer, outcome.by
            )
        if isinstance(outcome, Rejected):
            return await self._rejected(record, outcome)
        log.warning("challenge %s: outcome unknown: %s", record.challenge_id, outcome.reason)
        return await self._end_lease(record, outcome)

    async def _rejected(self, record: ChallengeRecord, outcome: Rejected) -> Next:
        """Nothing moved: back to PENDING; the payment's fault is 402, the settlers' 503.

        ``settler_failed`` means no settler of the network could take the payment
        (unreachable, every breaker open, the network unsupported): the payment is
        fine and the same one may be sent again after ``Retry-After``.
        """
        unavailable = outcome.settler_failed
        self.counters.failed(SETTLER_UNAVAILABLE_REASON if unavailable else outcome.reason)
        reason = (
            f"no settler could be reached ({outcome.reason}); nothing moved"
            if unavailable
            else f"settlement failed: {outcome.reason}"
        )
        # Handed to a settler, the payment is watched until it can no longer move
        # (docs/protocol/states.md, "A payment given back"); one the chain showed used
        # elsewhere or cancelled (``_used_already``) never can.
        assert record.payment is not None  # SETTLING: the claim stored it
        watch = record.payment.submitted and outcome.reason != Reason.NONCE_USED
        result = await self.mover.apply(moves.release(record, self.clock(), reason, watch=watch))
        if not isinstance(result, TransitionApplied):
            return await self.mover.current(record, result)
        if unavailable:
            raise SettlerUnavailable(
                f"no settler of {record.network} could be reached; nothing was transferred "
                "and the payment is still good: send the same request again later, with "
                "this purchase's requestId (or sign a new payment)",
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
            assert record.payment is not None  # SETTLING: the claim stored it
            by = "an earlier settlement of this authorization (shown by the chain)"
            return Settled(verdict.tx_hash, record.payment.payer, by)
        if isinstance(verdict, NotTransferred):
            return said
        return Unknown("the settler says the authorization is used; the chain has not shown it")

    async def _end_lease(self, record: ChallengeRecord, outcome: Unknown) -> ChallengeRecord:
        """Unknown outcome: end this attempt's lease so the chain decides from now on."""
        assert record.payment is not None  # SETTLING: the claim stored it
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
        return await self.delivery.answer(result.record)


def _drop(prechecking: PrecheckTask | None) -> None:
    """A precheck nobody will read: cancelled, its error (if it had one) read and dropped."""
    if prechecking is not None:
        prechecking.cancel()
        prechecking.add_done_callback(lambda task: task.cancelled() or task.exception())
