"""Deciding a SETTLING record from the chain, for the pipeline and the reconciler.

The rule, and why nothing is lost: docs/protocol/states.md.

A SETTLING record is looked at by a buyer's retry, by the request whose
settler could not tell the outcome, and by every reconciler pass. All of them
ask here, so there is one rule:

    the chain shows this authorization transferred        -> Paid, at once,
                                                             whatever lease runs
    never handed to a settler (nothing left this server)  -> Release, once the
                                                             record is ``grace`` old
    a lease (plus grace) is still running                 -> wait (None)
    the chain shows it not transferred (consistent reads) -> Release
    anything else (undecided, the RPC is down, no RPC)    -> wait (None)

A record that was never submitted may be released whatever its lease: the
attempt that claimed it must still win its own "submitted" compare-and-set
before anything leaves, and a released record makes that fail, so at worst a
live attempt starts over. That is how a buyer whose server died right after the
claim pays again at once instead of waiting for a dead process's lease.

``resolve`` applies the decision as a compare-and-set on the attempt it read,
so a decision made on a record that moved meanwhile is lost, never applied
twice. ``mark_paid`` is SETTLING -> PAID for whoever learnt the transaction (a
settler, or the chain): one transaction may pay several challenges (a batching
facilitator), so a txHash another challenge owns is shared only when the chain
shows THIS authorization used in it.

Each record is decided on its own network's chain (``chains``, by CAIP-2 id): a
seller paid on several networks has one reader per network.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from x402srv.access import moves
from x402srv.access.records import ChallengeRecord
from x402srv.interfaces import Clock, StateMismatch, TransitionApplied, TransitionResult, TxClaimed
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.verdicts import NotTransferred, Transferred, Verdict, resolve_authorization

__all__ = ["RECEIPT_REUSE_SECONDS", "Paid", "Release", "SettlingResolver"]

log = logging.getLogger("x402srv.access.pipeline")

#: A receipt the chain reader read this recently (a settler's confirmation) is not read
#: again to check the settler's txHash (``settles_in``).
RECEIPT_REUSE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Paid:
    tx_hash: str
    reason: str = "resolved from chain: transferred"


@dataclass(frozen=True, slots=True)
class Release:
    reason: str


class SettlingResolver:
    def __init__(self, chains: Mapping[str, ChainReader], mover: moves.Mover, clock: Clock) -> None:
        self.chains = chains
        self.mover = mover
        self.clock = clock

    def chain_of(self, record: ChallengeRecord) -> ChainReader | None:
        """The reader of the record's network (None: no RPC is configured there)."""
        return self.chains.get(record.network)

    async def resolve(self, record: ChallengeRecord, *, grace: float = 0.0) -> ChallengeRecord:
        """A SETTLING record: let the chain decide it, and return it as it is now.

        Safe to call concurrently and while an attempt is still in flight.
        """
        decision = await self.decide(record, grace=grace)
        if decision is None:
            return record
        if isinstance(decision, Paid):
            assert record.payment is not None
            result = await self.mark_paid(
                record, decision.tx_hash, record.payment.payer, decision.reason
            )
        else:
            result = await self.mover.apply(moves.release(record, self.clock(), decision.reason))
        if isinstance(result, TransitionApplied | StateMismatch) and result.record is not None:
            return result.record
        log.error("challenge %s: could not apply %s: %s", record.challenge_id, decision, result)
        return record

    async def mark_paid(
        self, record: ChallengeRecord, tx_hash: str, payer: str, reason: str
    ) -> TransitionResult:
        """SETTLING -> PAID, claiming the txHash; shared with another challenge only on proof."""
        result = await self.mover.apply(moves.paid(record, self.clock(), tx_hash, payer, reason))
        if not isinstance(result, TxClaimed) or not await self.settles_in(record, tx_hash):
            return result
        shared = f"{reason}; transaction shared with challenge {result.owner}"
        return await self.mover.apply(
            moves.paid(record, self.clock(), tx_hash, payer, shared, claim=False)
        )

    async def decide(self, record: ChallengeRecord, *, grace: float = 0.0) -> Paid | Release | None:
        """What the chain justifies for this SETTLING record now; None while undecided."""
        payment = record.payment
        assert payment is not None
        now = self.clock()
        verdict = await self.verdict(record)
        if isinstance(verdict, Transferred):
            return Paid(verdict.tx_hash)
        if not payment.submitted:
            if now >= record.updated_at + grace:
                return Release("never handed to a settler")
            return None
        if now < payment.lease_until + grace:
            return None
        if isinstance(verdict, NotTransferred):
            return Release(f"resolved from chain: {verdict.why}")
        return None

    async def settles_in(self, record: ChallengeRecord, tx_hash: str) -> bool:
        """Whether ``tx_hash`` used this record's own authorization and paid its payTo."""
        payment = record.payment
        chain = self.chain_of(record)
        if chain is None or payment is None:
            return False
        try:
            # The settler confirmed it on this very reader a moment ago: that read is
            # the chain's word too, and checked here against the record's own terms.
            receipt = await chain.receipt(tx_hash, read_within=RECEIPT_REUSE_SECONDS)
        except ChainUnavailable as exc:
            log.warning("challenge %s: cannot read %s: %s", record.challenge_id, tx_hash, exc)
            return False
        return receipt is not None and receipt.settles(
            record.asset, payment.payer, record.pay_to, int(payment.value), payment.nonce
        )

    async def verdict(self, record: ChallengeRecord) -> Verdict | None:
        """What the chain says of the record's authorization; None when it cannot tell."""
        payment = record.payment
        assert payment is not None
        chain = self.chain_of(record)
        if chain is None:
            return None
        try:
            return await resolve_authorization(
                chain,
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
