"""Step 3's last way: a discovery-first purchase, its challenge created already SETTLING.

Nothing is stored before the payment passes step 5, and concurrent replays
of one payment converge on a single challenge through the claim: the record
and the claim are inserted together or not at all. Its requestId is the
body's, else the one the 402 offered (echoed in ``accepted.extra.requestId``),
so the buyer's own header proves it on a retry. A payment without one (no
standard client sends that) still buys, under a requestId made here: the
grant says it, and only it fetches the grant again, since such a header is
exactly what anyone can rebuild from the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from x402srv.access.claim_payment import PaymentClaimer
from x402srv.access.failpoints import failpoint
from x402srv.access.ids import uuid4_str
from x402srv.access.new_challenge import ChallengeMaker, same_purchase
from x402srv.access.progress import Caller, Claimed, SentPayment
from x402srv.access.proof import PurchaseProof
from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Plan
from x402srv.errors import TxAlreadyRedeemed
from x402srv.interfaces import PaymentClaimed, Store
from x402srv.usage.counters import Counters

__all__ = ["ImplicitPurchase"]


@dataclass(frozen=True, slots=True)
class ImplicitPurchase:
    store: Store
    challenges: ChallengeMaker
    claimer: PaymentClaimer
    proof: PurchaseProof
    counters: Counters

    async def start(
        self, caller: Caller, payment: SentPayment, plan: Plan, grant: ChallengeRecord | None
    ) -> ChallengeRecord | Claimed:
        """The challenge created and claimed for ``payment``, or the one a replay of it made."""
        body = caller.body
        request_id = body.request_id or payment.payload.request_id or uuid4_str()
        pending = self.challenges.record(
            plan, request_id, body.resource_id, implicit=True, grant=grant
        )
        claim, checked = self.claimer.move(pending, payment, pending.created_at)
        await self.claimer.bind_id(payment)
        settling = pending.apply(claim.changes, State.SETTLING, claim.at, claim.reason)
        created = await self.store.create_challenge(settling, claim_payment=payment.key)
        if isinstance(created, PaymentClaimed):
            owner = await self.store.get_challenge(created.owner)
            if owner is None or not owner.implicit or owner.plan_id != plan.plan_id:
                self.counters.failed("already_redeemed")
                raise TxAlreadyRedeemed("this payment is already used for another challenge")
            self.proof.prove(owner, caller)  # a concurrent replay: its buyer's, or nobody's
            same_purchase(owner, body, plan, grant)
            return owner
        record, was_created = created
        if not was_created:
            same_purchase(record, body, plan, grant)
            return record
        self.challenges.note_created(record)
        failpoint("after-claim")
        return Claimed(record, checked)
