"""Steps 5-7: check the payment, then claim it and move PENDING -> SETTLING in one move.

The claim of ``(chainId, asset, from, nonce)`` and the move to SETTLING are
one compare-and-set, made before anything goes on-chain: of two requests
with the same payment, or two payments for the same challenge, one wins and
the other is told so (409). What the check finds (``payment_check``) becomes
the record's payment and the offer it chose.
"""

from __future__ import annotations

from dataclasses import dataclass

from x402srv.access import moves
from x402srv.access.failpoints import failpoint
from x402srv.access.ids import uuid4_hex
from x402srv.access.payment_check import PaymentCheck
from x402srv.access.payment_ids import PaymentIds
from x402srv.access.progress import CheckedPayment, Claimed, SentPayment
from x402srv.access.records import ChallengeRecord, State
from x402srv.errors import InternalError, PaymentFailed, SettlementInProgress, TxAlreadyRedeemed
from x402srv.interfaces import (
    Clock,
    PaymentClaimed,
    StateMismatch,
    TransitionApplied,
    TransitionRequest,
)
from x402srv.usage.counters import Counters

__all__ = ["PaymentClaimer"]


@dataclass(frozen=True, slots=True)
class PaymentClaimer:
    payments: PaymentCheck
    mover: moves.Mover
    clock: Clock
    counters: Counters
    lease_seconds: float
    payment_ids: PaymentIds | None = None

    def move(
        self, record: ChallengeRecord, payment: SentPayment, at: float
    ) -> tuple[TransitionRequest, CheckedPayment]:
        """Steps 5-7 as one move: the payment checked, then claimed with PENDING -> SETTLING."""
        self.counters.add(f"tried:{record.plan_id}")
        try:
            checked = self.payments.check(record, payment)
        except PaymentFailed as failure:
            self.counters.failed(failure.reason)
            raise
        move = moves.settle(
            record, checked, at, attempt_id=uuid4_hex(), lease_seconds=self.lease_seconds
        )
        return move, checked

    async def bind_id(self, payment: SentPayment) -> None:
        """The payment's payment-identifier id bound to it, once checked (``payment_ids``)."""
        if self.payment_ids is not None:
            await self.payment_ids.bind(payment)

    async def claim(
        self, record: ChallengeRecord, payment: SentPayment
    ) -> ChallengeRecord | Claimed:
        """The challenge claimed for ``payment``, or the record as another request left it."""
        move, checked = self.move(record, payment, self.clock())
        await self.bind_id(payment)
        result = await self.mover.apply(move)
        if isinstance(result, PaymentClaimed):
            self.counters.failed("already_redeemed")
            raise TxAlreadyRedeemed("this payment is already used for another challenge")
        if isinstance(result, StateMismatch):
            if result.record is None:
                raise InternalError()
            if result.record.state is State.SETTLING:
                # Another request won this very moment: it is settling, nothing to ask yet.
                raise SettlementInProgress("this challenge is being settled now", retry_after=2)
            return result.record
        if not isinstance(result, TransitionApplied):  # no txHash was claimed: a broken store
            raise InternalError()
        failpoint("after-claim")
        return Claimed(result.record, checked)
