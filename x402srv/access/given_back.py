"""A payment a settler gave back, watched until the chain can no longer move it.

The rule, and why nothing is lost: docs/protocol/states.md, "A payment given back".

A settler that refused a payment, or could not take it, was handed the whole
authorization, and so may anyone who read its logs: until ``validBefore`` any of
them can send it to the token themselves, and the buyer's money reaches the
seller. So the PENDING record it goes back to keeps the payment (``moves.release``
with ``watch``), and before anything ends that record, the chain is asked:

    the chain shows it transferred   -> SETTLING again on it (``moves.retake``) and
                                        on to PAID as any settlement the chain
                                        decides: the buyer's grant, no new payment
    it can no longer move (expired   -> the record may expire, be cancelled or
    unused, or cancelled)               take a new payment; the kept one goes
    anything else (still valid and   -> an expiry or a cancellation waits; a new
    unused, the RPC down)               payment of the buyer's is taken all the same

Who asks: the buyer's own requests (``AccessPipeline._step``: before a payment of
its is taken, and when its challenge is past ``expiresAt``), the reconciler
(each record due to expire) and an operator's cancellation. A caller without
proof of the purchase never makes a chain read here: it would let anyone who
holds the copy make the server read the chain as often as it likes.

A seller with no chain reader for the network cannot watch: its records behave as
before there was a watch (they expire, and take a new payment, unasked).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from x402srv.access import moves
from x402srv.access.ids import uuid4_hex
from x402srv.access.records import ChallengeRecord, State
from x402srv.access.recovery import SettlingResolver
from x402srv.interfaces import Clock, TransitionApplied
from x402srv.settlement.verdicts import NotTransferred, Transferred

__all__ = ["Kept", "KeptPayments", "cancel_waits", "kept_payment"]

#: Compare-and-sets ``KeptPayments.end`` makes on a record other moves keep PENDING.
_TRIES = 4


def kept_payment(record: ChallengeRecord) -> bool:
    """Whether ``record`` is PENDING with a payment a settler gave back."""
    return record.state is State.PENDING and record.payment is not None


def cancel_waits(record: ChallengeRecord) -> str:
    """Why an operator cannot cancel ``record``, still PENDING: it kept a payment that may
    still move, or (none kept) it kept changing while the cancellation was tried."""
    if record.payment is None:
        return f"challenge {record.challenge_id} changed while it was being cancelled; try again"
    return (
        f"challenge {record.challenge_id} holds a payment its settler gave back, which "
        f"anyone who saw it may still send to the token until {record.payment.valid_before} "
        "(validBefore, unix time); cancelled, such a transfer would pay for nothing. "
        "Cancel it after then"
    )


class Kept(enum.Enum):
    """What the chain allows for a record's kept payment, when it did not move the record."""

    GONE = "it can no longer move"  # expired unused or cancelled: the record may end
    OPEN = "it may still move"  # still valid and unused, or the chain could not tell
    UNWATCHED = "no chain reader for its network"


@dataclass(frozen=True, slots=True)
class KeptPayments:
    """Asks the chain about kept payments, and moves a record whose payment moved."""

    resolver: SettlingResolver
    mover: moves.Mover
    clock: Clock

    async def look(self, record: ChallengeRecord) -> ChallengeRecord | Kept:
        """The record as it is now if its kept payment was transferred; else what may be done."""
        assert kept_payment(record)
        if self.resolver.chain_of(record) is None:
            return Kept.UNWATCHED
        verdict = await self.resolver.verdict(record)
        if isinstance(verdict, NotTransferred):
            return Kept.GONE
        if not isinstance(verdict, Transferred):
            return Kept.OPEN
        reason = "its payment, given back, was transferred on-chain"
        result = await self.mover.apply(
            moves.retake(record, self.clock(), reason, attempt_id=uuid4_hex())
        )
        current = await self.mover.current(record, result)
        if current.state is State.SETTLING:
            current = await self.resolver.resolve(current)
        return current

    async def end(self, record: ChallengeRecord, to: State, reason: str) -> ChallengeRecord:
        """PENDING -> ``to`` (EXPIRED or CANCELLED) unless its kept payment may still move.

        Returns the record as it is now: still PENDING while the kept payment may
        move, PAID (or on its way there) if it moved. A compare-and-set lost to a
        move that left the record PENDING (the buyer's new payment claimed, then
        given back) is made again on the record as it is now: that record may
        hold another payment, or none, and is decided on its own.
        """
        for _ in range(_TRIES):
            if kept_payment(record):
                looked = await self.look(record)
                if isinstance(looked, ChallengeRecord):
                    if looked.state is not State.PENDING:
                        return looked
                    record = looked  # (its retake lost so: again on the record as it is)
                    continue
                if looked is Kept.OPEN:
                    return record
            build = moves.expire if to is State.EXPIRED else moves.cancel
            result = await self.mover.apply(build(record, self.clock(), reason))
            current = await self.mover.current(record, result)
            if isinstance(result, TransitionApplied) or current.state is not State.PENDING:
                return current
            record = current
        return record
