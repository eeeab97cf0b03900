"""The admin API's refunds (docs/refunds.md): what a purchase paid and refunded, and asking.

``POST`` checks its whole body before anything is stored or sent: bad input is
400 INVALID_REQUEST, with no refund record and no chain call. The refund is
then held by the store's claim (never past what the purchase paid) and sent
at once through the network's settlers; what cannot finish now, the
reconciler finishes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from x402srv.errors import InvalidRequest, StateConflict
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.running import sender_of
from x402srv.refunds.service import PurchaseMoney, money_of, request_refund
from x402srv.wire.offers import rfc3339

if TYPE_CHECKING:
    from x402srv.access.pipeline import AccessPipeline

__all__ = ["ask_refund", "purchase_refunds"]

_ATOMIC = re.compile(r"[1-9][0-9]{0,77}")


def _shown(money: PurchaseMoney) -> dict[str, Any]:
    return {
        "challengeId": money.purchase.challenge_id,
        "paid": str(money.paid),
        "refunded": str(money.refunded),
        "left": str(money.left),
        "refunds": [_refund(refund) for refund in money.refunds],
    }


def _refund(refund: RefundRecord) -> dict[str, Any]:
    """A refund as the console and the API show it: its times in RFC 3339."""
    shown = refund.to_dict()
    for key in ("created_at", "updated_at"):
        shown[key] = rfc3339(shown[key])
    for step in shown["history"]:
        step["at"] = rfc3339(step["at"])
    return shown


async def purchase_refunds(pipeline: AccessPipeline, challenge_id: str) -> dict[str, Any]:
    return _shown(await money_of(pipeline.store, challenge_id))


def _amount(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and _ATOMIC.fullmatch(value):
        return int(value)
    raise InvalidRequest("amount must be a positive integer of atomic units, as a string")


async def ask_refund(
    pipeline: AccessPipeline, challenge_id: str, body: dict[str, Any], who: str
) -> dict[str, Any]:
    amount = _amount(body.get("amount"))
    reason = body.get("reason")
    keep = body.get("keepGrant", False)
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 500:
        raise InvalidRequest("reason must be a non-empty string of at most 500 characters")
    if not isinstance(keep, bool):
        raise InvalidRequest("keepGrant must be true or false")
    sender = sender_of(pipeline)
    if sender is None:
        raise StateConflict("refunds are not configured ([refunds]) or the store keeps none")
    refund = await request_refund(
        pipeline.store,
        pipeline.config,
        challenge_id,
        amount=amount,
        reason=reason,
        asked_by=f"operator:{who}",
        revoke_grant=not keep,
        clock=pipeline.clock,
    )
    refund = await sender.send(refund)
    return {"refund": _refund(refund), **_shown(await money_of(pipeline.store, challenge_id))}
