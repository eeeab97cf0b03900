"""Asking for a refund of a purchase: checks, then the store's claim (docs/refunds.md).

Used by ``x402srv refunds create``, the admin API and the automatic rules. A
refund is asked for in atomic units up to what is left of the purchase
(``None``: all of it); the store's ``create_refund`` is what finally holds the
amount, so two operators (or an operator and a rule) asking at once can never
take the purchase past what it paid.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Config
from x402srv.errors import InvalidRequest, NotFound, StateConflict
from x402srv.interfaces import Clock, Store
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.rules import OverRefund, refunded
from x402srv.refunds.store import RefundStore, keeps_refunds

__all__ = ["PAID_STATES", "PurchaseMoney", "money_of", "refund_store", "request_refund"]

#: A purchase in one of these states was paid on-chain: it can be refunded.
PAID_STATES = (State.PAID, State.DELIVERED, State.OWED)


@dataclass(frozen=True, slots=True)
class PurchaseMoney:
    """What a refund screen shows: paid, already refunded (or being sent), what is left."""

    purchase: ChallengeRecord
    paid: int
    refunded: int
    refunds: list[RefundRecord]

    @property
    def left(self) -> int:
        return max(0, self.paid - self.refunded)


def refund_store(store: Store) -> RefundStore:
    if not keeps_refunds(store):
        raise StateConflict(f"the {store.name} store keeps no refunds")
    assert isinstance(store, RefundStore)
    return store


async def money_of(store: Store, purchase_id: str) -> PurchaseMoney:
    purchase = await store.get_challenge(purchase_id)
    if purchase is None:
        raise NotFound(f"no purchase {purchase_id}")
    refunds = await refund_store(store).list_refunds(purchase_id=purchase_id, limit=10_000)
    return PurchaseMoney(purchase, int(purchase.amount), refunded(refunds), refunds)


async def request_refund(
    store: Store,
    config: Config,
    purchase_id: str,
    *,
    amount: int | None,
    reason: str,
    asked_by: str,
    revoke_grant: bool,
    clock: Clock,
) -> RefundRecord:
    """A new REQUESTED refund of ``purchase_id`` (``amount`` None: what is left)."""
    money = await money_of(store, purchase_id)
    purchase = money.purchase
    if purchase.state not in PAID_STATES or not purchase.payer or not purchase.tx_hash:
        raise StateConflict(
            f"purchase {purchase_id} is {purchase.state.value}: only a paid purchase is refunded"
        )
    if config.refunds.key_for(purchase.network, purchase.network) is None:
        raise StateConflict(f"no refund wallet is configured for {purchase.network} ([refunds])")
    wanted = money.left if amount is None else amount
    if wanted <= 0:
        raise InvalidRequest(
            f"nothing left to refund of {purchase_id}" if amount is None else "amount must be > 0"
        )
    if not reason.strip() or len(reason) > 500:
        raise InvalidRequest("a refund needs a reason (at most 500 characters)")
    refund = RefundRecord.new(
        refund_id=f"rf_{secrets.token_hex(16)}",
        purchase_id=purchase_id,
        network=purchase.network,
        asset=purchase.asset,
        to=purchase.payer,
        amount=wanted,
        reason=reason.strip(),
        asked_by=asked_by,
        now=clock(),
        revoke_grant=revoke_grant,
    )
    created = await refund_store(store).create_refund(refund, paid=money.paid)
    if isinstance(created, OverRefund):
        raise StateConflict(
            f"purchase {purchase_id} paid {money.paid}; only {created.left} is left to refund"
        )
    return created.record
