"""Sales for accounting: one row per settled payment (``x402srv export-sales``, the console).

A row is a challenge that reached PAID: when it settled (UTC), the plan, the
network and asset, the amount in the token's atomic units and in US dollars
(USD stablecoins only), the payer, the txHash, the requestId and challengeId,
and its status now: ``delivered``, ``paid`` (the credential is not issued
yet: the reconciler or the buyer's retry will issue it), ``revoked``, or
``owed`` (a top-up whose grant was revoked or expired before it could be
credited: the payment is owed back to the buyer). A refund that reached the
chain is a row of its own (status ``refund``): a negative amount at the time
it was refunded, its txHash, the buyer, and the purchase's challengeId and
requestId, so the two rows add up; ``refundId`` names it.

Every cell is safe to open in a spreadsheet (``cell``): a text that starts
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return would be read as a
formula (OWASP "CSV injection": ``=HYPERLINK(...)`` in a payer once came from a
facilitator's answer), so it gets a leading ``'``, which spreadsheets show as
text and do not display. A plain number (``-100000``: a refund row) is left as
it is: no spreadsheet reads a bare decimal as anything but that number, and
accounting must be able to add it up. The same cells go into CSV and JSON
Lines: a JSON Lines file is opened by spreadsheet import tools too.

The rows come from the records, newest update first (``find_challenges``),
read back only as far as the start of the range, then sorted by settlement
time. Records leave the store ``[reconciler] retention_days`` after their last
change, so export at least that often (a monthly export with the default 30
days keeps every sale).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from typing import Any, Final, Literal

from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Config
from x402srv.interfaces import Store
from x402srv.refunds.records import RefundRecord, RefundState
from x402srv.refunds.store import RefundStore, keeps_refunds
from x402srv.usage.figures import token_terms, usd
from x402srv.wire.offers import rfc3339

__all__ = ["FIELDS", "Format", "cell", "render", "sale_rows"]

FIELDS: Final = (
    "settledAt",
    "planId",
    "network",
    "asset",
    "amount",
    "amountUsd",
    "payer",
    "txHash",
    "requestId",
    "challengeId",
    "status",
    "resourceId",
    "receipt",  # the signed offer-receipt receipt, compact JSON (docs/offer-receipt.md), or ""
    "refundId",  # a refund row's refund (docs/refunds.md), or ""
)
#: Records read per store call.
PAGE: Final = 500

Format = Literal["csv", "jsonl"]

#: What a spreadsheet reads as the start of a formula (OWASP, CSV injection).
_FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")
#: A bare decimal number, which every spreadsheet reads as a number, never a formula.
_NUMBER: Final = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def cell(value: str) -> str:
    """``value`` as a spreadsheet can open it: a would-be formula becomes text (``'``)."""
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def _settled_at(record: ChallengeRecord) -> float | None:
    for step in record.history:
        if step.state is State.PAID:
            return step.at
    return None


def _status(record: ChallengeRecord) -> str:
    if record.state is State.OWED:
        return "owed"
    if record.revoked_at is not None:
        return "revoked"
    return "delivered" if record.state is State.DELIVERED else "paid"


def _row(record: ChallengeRecord, settled: float, config: Config) -> dict[str, str]:
    decimals, pegged = token_terms(config, record.network, record.asset)
    dollars = usd(int(record.amount), decimals) if pegged and decimals is not None else ""
    return {
        "settledAt": rfc3339(settled),
        "planId": record.plan_id,
        "network": record.network,
        "asset": record.asset,
        "amount": record.amount,
        "amountUsd": dollars,
        "payer": record.payer or "",
        "txHash": record.tx_hash or "",
        "requestId": record.request_id,
        "challengeId": record.challenge_id,
        "status": _status(record),
        "resourceId": record.resource_id,
        "receipt": _receipt(record),
        "refundId": "",
    }


def _receipt(record: ChallengeRecord) -> str:
    signed = (record.grant or {}).get("receipt")
    return json.dumps(signed, separators=(",", ":")) if isinstance(signed, dict) else ""


def _refunded_at(refund: RefundRecord) -> float | None:
    for step in refund.history:
        if step.state is RefundState.REFUNDED:
            return step.at
    return None


def _refund_row(
    refund: RefundRecord, purchase: ChallengeRecord | None, at: float, config: Config
) -> dict[str, str]:
    """A refund as a negative sale, linked to its purchase by challengeId (docs/refunds.md)."""
    decimals, pegged = token_terms(config, refund.network, refund.asset)
    dollars = usd(refund.value, decimals) if pegged and decimals is not None else ""
    return {
        "settledAt": rfc3339(at),
        "planId": purchase.plan_id if purchase else "",
        "network": refund.network,
        "asset": refund.asset,
        "amount": f"-{refund.amount}",
        "amountUsd": f"-{dollars}" if dollars else "",
        "payer": refund.to,
        "txHash": refund.tx_hash or "",
        "requestId": purchase.request_id if purchase else "",
        "challengeId": refund.purchase_id,
        "status": "refund",
        "resourceId": purchase.resource_id if purchase else "",
        "receipt": "",
        "refundId": refund.refund_id,
    }


async def _refund_rows(
    store: Store, config: Config, start: float, end: float
) -> list[tuple[float, str, dict[str, str]]]:
    """Every refund that reached the chain in ``[start, end)``."""
    if not keeps_refunds(store):
        return []
    assert isinstance(store, RefundStore)
    found: list[tuple[float, str, dict[str, str]]] = []
    after: tuple[float, str] | None = None
    while True:
        page = await store.list_refunds(states=[RefundState.REFUNDED], after=after, limit=PAGE)
        for refund in page:
            at = _refunded_at(refund)
            if at is not None and start <= at < end:
                purchase = await store.get_challenge(refund.purchase_id)
                found.append((at, refund.refund_id, _refund_row(refund, purchase, at, config)))
        # A refund reached the chain after it was asked for: none after ``end`` is in range.
        if len(page) < PAGE or page[-1].created_at >= end:
            return found
        after = (page[-1].created_at, page[-1].refund_id)


async def sale_rows(store: Store, config: Config, start: float, end: float) -> list[dict[str, str]]:
    """Every payment settled in ``[start, end)``, oldest first."""
    found: list[tuple[float, str, dict[str, str]]] = []
    before: tuple[float, str] | None = None
    while True:
        page = await store.find_challenges(
            states=[State.PAID, State.DELIVERED, State.OWED], before=before, limit=PAGE
        )
        for record in page:
            settled = _settled_at(record)
            if settled is not None and start <= settled < end:
                found.append((settled, record.challenge_id, _row(record, settled, config)))
        # A record settled in the range was updated at or after it settled.
        if len(page) < PAGE or page[-1].updated_at < start:
            break
        before = (page[-1].updated_at, page[-1].challenge_id)
    found += await _refund_rows(store, config, start, end)
    found.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in found]


def _safe(row: dict[str, Any]) -> dict[str, Any]:
    return {key: cell(value) if isinstance(value, str) else value for key, value in row.items()}


def render(rows: Iterable[dict[str, Any]], form: Format) -> str:
    """CSV with a header line, or JSON Lines; every text cell safe for a spreadsheet."""
    if form == "jsonl":
        return "".join(json.dumps(_safe(row), separators=(",", ":")) + "\n" for row in rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(_safe(row) for row in rows)
    return out.getvalue()
