"""The compare-and-set moves of the state machine, built and applied in one place.

The moves and who makes them: docs/protocol/states.md.

``Mover.apply`` is the only way a record changes state: the store applies the
move atomically, then each applied move gets one log line and is shown to the
observers (A2A streams settlement progress from them). The builders say which
moves there are; each carries the attempt it expects, so a move made on a
record that changed meanwhile is lost, never applied twice.

    settling  PENDING -> SETTLING, claiming the payment       (``settle``)
    note      SETTLING -> SETTLING by the attempt that holds it (hand-over,
              broadcast, lease ended; PAID -> PAID likewise: the delivery claim)
    release   SETTLING -> PENDING, the claim kept by it      (nothing moved on-chain;
              the payment kept too while it may still move: ``given_back``)
    retake    PENDING -> SETTLING on the payment it kept      (the chain shows it moved)
    paid      SETTLING -> PAID, claiming the txHash
    deliver   PAID -> DELIVERED with the grant
    owe       PAID -> OWED: a top-up its grant can no longer use (``delivery``)
    give_up   PAID -> OWED on the delivery attempt as read: no credential in time
              (``x402srv.refunds.automatic``)
    expire    PENDING -> EXPIRED
    cancel    PENDING -> CANCELLED                           (an operator)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from x402srv.access.progress import CheckedPayment
from x402srv.access.records import (
    ChallengeRecord,
    PaymentDetails,
    RecordChanges,
    State,
)
from x402srv.errors import InternalError
from x402srv.interfaces import (
    Clock,
    StateMismatch,
    Store,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
)
from x402srv.server.logs import fingerprint

__all__ = [
    "AttemptHooks",
    "Mover",
    "cancel",
    "deliver",
    "expire",
    "give_up",
    "note",
    "owe",
    "paid",
    "release",
    "retake",
    "settle",
]

log = logging.getLogger("x402srv.access.pipeline")

Observer = Callable[[ChallengeRecord], None]


class Mover:
    """Applies moves to the store; logs and shows each one that applied."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self.observers: list[Observer] = []

    async def apply(self, request: TransitionRequest) -> TransitionResult:
        result = await self.store.transition(request)
        if isinstance(result, TransitionApplied):
            record = result.record
            for observer in self.observers:
                observer(record)
            log.info(
                "challenge %s request %s: %s -> %s (%s)",
                record.challenge_id,
                fingerprint(record.request_id),
                request.expect.value,
                request.to.value,
                request.reason,
                extra={
                    "challenge_id": record.challenge_id,
                    "request_fp": fingerprint(record.request_id),
                    "from_state": request.expect.value,
                    "to_state": request.to.value,
                },
            )
        return result

    async def current(
        self, record: ChallengeRecord, result: TransitionResult | None = None
    ) -> ChallengeRecord:
        """The record as it is now, after a compare-and-set that was lost (or not tried)."""
        if isinstance(result, TransitionApplied | StateMismatch) and result.record is not None:
            return result.record
        found = await self.store.get_challenge(record.challenge_id)
        if found is None:
            raise InternalError()
        return found


class AttemptHooks:
    """Lets a settler persist its txHash on the SETTLING record of its own attempt."""

    def __init__(self, mover: Mover, record: ChallengeRecord) -> None:
        self._mover = mover
        self.record = record

    async def note_broadcast(self, tx_hash: str) -> None:
        assert self.record.payment is not None
        payment = replace(self.record.payment, broadcast_tx_hash=tx_hash.lower())
        await self._apply("transaction broadcast", payment)

    async def note(self, reason: str) -> None:
        """A line in the record's history (a failover moving to its next settler)."""
        assert self.record.payment is not None
        await self._apply(reason, self.record.payment)

    async def _apply(self, reason: str, payment: PaymentDetails) -> None:
        result = await self._mover.apply(note(self.record, self._mover.clock(), reason, payment))
        if isinstance(result, TransitionApplied):
            self.record = result.record


def settle(
    record: ChallengeRecord,
    payment: CheckedPayment,
    at: float,
    *,
    attempt_id: str,
    lease_seconds: float,
) -> TransitionRequest:
    """PENDING -> SETTLING with the payment persisted and claimed, before anything is sent.

    The challenge's offer the payment chose (its network, token and amount)
    becomes the record's own.
    """
    auth = payment.authorization
    details = PaymentDetails(
        payer=auth.payer,
        nonce=auth.nonce,
        value=str(auth.value),
        valid_after=auth.valid_after,
        valid_before=auth.valid_before,
        signature=auth.signature,
        key=str(payment.key),
        attempt_id=attempt_id,
        lease_until=at + lease_seconds,
    )
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.PENDING,
        to=State.SETTLING,
        at=at,
        reason="settlement started",
        changes=RecordChanges(payment=details, offer=payment.offer),
        claim_payment=payment.key,
    )


def note(
    record: ChallengeRecord, at: float, reason: str, payment: PaymentDetails
) -> TransitionRequest:
    """A move of the attempt that holds the record onto itself, writing its payment anew."""
    return _held(record, record.state, at, reason, RecordChanges(payment=payment))


def release(
    record: ChallengeRecord, at: float, reason: str, *, watch: bool = False
) -> TransitionRequest:
    """SETTLING -> PENDING: nothing moved on-chain, and the payment's claim stays with it.

    A settler saw the payment (a facilitator may log it), and one no settler could
    take is still good: another purchase must never take it, and this one takes it
    again only from its buyer (docs/protocol/proof.md, ``AccessPipeline._step``).
    With ``watch`` (a settler was handed it: anyone it reached may still send it to
    the token until its ``validBefore``) the record keeps the payment, its lease
    ended, so that the chain can still decide it (``x402srv.access.given_back``);
    else (the chain showed it can no longer move, or it never left) it goes.
    """
    if watch:
        assert record.payment is not None
        kept = replace(record.payment, lease_until=min(record.payment.lease_until, at))
        return _held(record, State.PENDING, at, reason, RecordChanges(payment=kept))
    return _held(record, State.PENDING, at, reason, RecordChanges(clear_payment=True))


def retake(
    record: ChallengeRecord, at: float, reason: str, *, attempt_id: str
) -> TransitionRequest:
    """PENDING -> SETTLING with the payment it kept: the chain shows that payment transferred.

    A compare-and-set on the kept payment's attempt; the new attempt's lease is
    over at once, so whoever reads the record next decides it from the chain
    (``x402srv.access.given_back``). The payment's claim is the record's already.
    """
    assert record.payment is not None
    payment = replace(record.payment, attempt_id=attempt_id, lease_until=at, submitted=True)
    return _held(record, State.SETTLING, at, reason, RecordChanges(payment=payment))


def paid(
    record: ChallengeRecord, at: float, tx_hash: str, payer: str, reason: str, *, claim: bool = True
) -> TransitionRequest:
    """SETTLING -> PAID; the settlement lease ends with it, so the delivery claim is free."""
    assert record.payment is not None
    tx_hash = tx_hash.lower()
    changes = RecordChanges(
        tx_hash=tx_hash, payer=payer, payment=replace(record.payment, lease_until=at)
    )
    return _held(record, State.PAID, at, reason, changes, claim_tx_hash=tx_hash if claim else None)


def deliver(
    record: ChallengeRecord, at: float, grant: dict[str, object], *, claimed: bool
) -> TransitionRequest:
    """PAID -> DELIVERED with the grant (by the delivery claim's holder when ``claimed``)."""
    assert record.payment is not None
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.PAID,
        to=State.DELIVERED,
        at=at,
        reason="credential issued",
        changes=RecordChanges(grant=grant),
        attempt_id=record.payment.attempt_id if claimed else None,
    )


def owe(record: ChallengeRecord, at: float, why: str) -> TransitionRequest:
    """PAID -> OWED: paid for, nothing delivered; the payment is owed back to the payer.

    No attempt check (as a top-up's delivery): the first of two deliveries wins,
    the other finds the record OWED.
    """
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.PAID,
        to=State.OWED,
        at=at,
        reason=f"owed to the buyer: {why}",
    )


def give_up(record: ChallengeRecord, at: float, why: str) -> TransitionRequest:
    """PAID -> OWED for a purchase whose credential was not issued in time.

    A compare-and-set on the delivery attempt as read: a delivery that claims
    the record meanwhile (a new attempt) or delivers it first wins, and this
    move is lost. Once it applied, no delivery can follow (they expect PAID).
    """
    assert record.payment is not None
    return TransitionRequest(
        challenge_id=record.challenge_id,
        expect=State.PAID,
        to=State.OWED,
        at=at,
        reason=f"owed to the buyer: {why}",
        attempt_id=record.payment.attempt_id,
    )


def expire(
    record: ChallengeRecord, at: float, reason: str = "expired before payment"
) -> TransitionRequest:
    """PENDING -> EXPIRED; one that kept a payment given back expires with the payment it read."""
    return _end(record, State.EXPIRED, at, reason)


def cancel(record: ChallengeRecord, at: float, reason: str) -> TransitionRequest:
    """PENDING -> CANCELLED (an operator); on the payment it kept, read, as ``expire``."""
    return _end(record, State.CANCELLED, at, reason)


def _end(record: ChallengeRecord, to: State, at: float, reason: str) -> TransitionRequest:
    """PENDING -> ``to``; a kept payment goes with it, on that payment's attempt as read."""
    if record.payment is not None:
        return _held(record, to, at, reason, RecordChanges(clear_payment=True))
    return TransitionRequest(
        challenge_id=record.challenge_id, expect=State.PENDING, to=to, at=at, reason=reason
    )


def _held(
    record: ChallengeRecord,
    to: State,
    at: float,
    reason: str,
    changes: RecordChanges,
    *,
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
        claim_tx_hash=claim_tx_hash,
    )
