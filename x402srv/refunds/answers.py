"""What a buyer sees of a refund: the purchase answers 410 GRANT_REFUNDED with its txHash.

Asked only on the paths that already refuse (a revoked grant, an OWED
top-up), so a purchase that stands never reads its refunds.
"""

from __future__ import annotations

from x402srv.errors import GrantRefunded
from x402srv.interfaces import Store
from x402srv.refunds.records import RefundState
from x402srv.refunds.store import RefundStore, keeps_refunds

__all__ = ["refunded_answer"]


async def refunded_answer(store: Store, purchase_id: str) -> GrantRefunded | None:
    """``GrantRefunded`` when a refund of the purchase is on-chain, else None."""
    if not keeps_refunds(store):
        return None
    assert isinstance(store, RefundStore)
    refunds = await store.list_refunds(
        purchase_id=purchase_id, states=[RefundState.REFUNDED], limit=100
    )
    if not refunds:
        return None
    last = refunds[-1]
    total = sum(r.value for r in refunds)
    return GrantRefunded(
        f"the payment of challenge {purchase_id} was refunded to you ({total} atomic units)",
        extra={
            "txHash": last.tx_hash,
            "refunds": [
                {"refundId": r.refund_id, "amount": r.amount, "txHash": r.tx_hash} for r in refunds
            ],
        },
    )
