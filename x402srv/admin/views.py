"""Challenge records as the console shows them: JSON documents, never a secret.

A bearer token and a payment signature never leave the server through the
console: a grant is shown without its ``accessToken``, a payment without its
``signature``. Times are RFC 3339 UTC. Cursors are opaque to clients: the
base64url JSON of the last row's ``(updated_at, challenge_id)``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from typing import Any

from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Config
from x402srv.errors import InvalidRequest
from x402srv.interfaces import CreditAccount
from x402srv.wire.offers import rfc3339

__all__ = [
    "challenge_view",
    "decode_cursor",
    "encode_cursor",
    "grant_view",
    "purchase_detail",
    "purchase_view",
    "usage_view",
]

#: What counts as a purchase: a payment is (or was) being settled.
PURCHASE_STATES = (State.SETTLING, State.PAID, State.DELIVERED, State.OWED)


def _time(at: float | None) -> str | None:
    """RFC 3339, or None for a time the record does not have (yet)."""
    return None if at is None else rfc3339(at)


def encode_cursor(record: ChallengeRecord) -> str:
    raw = json.dumps([record.updated_at, record.challenge_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode("ascii")


def decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, challenge_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidRequest("cursor: not a cursor this API gave out") from None
    if isinstance(at, bool) or not isinstance(at, int | float) or not isinstance(challenge_id, str):
        raise InvalidRequest("cursor: not a cursor this API gave out")
    return float(at), challenge_id


def _settled_at(record: ChallengeRecord) -> float | None:
    for step in record.history:
        if step.state is State.PAID:
            return step.at
    return None


def _grant_expiry(record: ChallengeRecord) -> float | None:
    expires = (record.grant or {}).get("expiresAt")
    if not isinstance(expires, str):
        return None
    try:
        return dt.datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _explorer(config: Config, record: ChallengeRecord, tx_hash: str | None) -> str | None:
    """The explorer page of the transaction, on the network the buyer paid on."""
    if not tx_hash:
        return None
    info = config.option(record.network, record.asset) or config.network_info
    return info.explorer_url(tx_hash)


def _payer(record: ChallengeRecord) -> str | None:
    return record.payer or (record.payment.payer if record.payment is not None else None)


def purchase_view(record: ChallengeRecord, config: Config, now: float) -> dict[str, Any]:
    """One row of the purchases list."""
    expires = _grant_expiry(record)
    tx_hash = record.tx_hash or (record.payment.broadcast_tx_hash if record.payment else None)
    return {
        "challengeId": record.challenge_id,
        "requestId": record.request_id,
        "planId": record.plan_id,
        "resourceId": record.resource_id,
        "state": record.state.value,
        "amount": record.amount,
        "network": record.network,
        "asset": record.asset,
        "payer": _payer(record),
        "txHash": tx_hash,
        "explorerUrl": _explorer(config, record, tx_hash),
        "createdAt": rfc3339(record.created_at),
        "updatedAt": rfc3339(record.updated_at),
        "settledAt": _time(_settled_at(record)),
        "grantExpiresAt": _time(expires),
        "secondsLeft": max(0, int(expires - now)) if expires is not None else None,
        "revokedAt": _time(record.revoked_at),
        "implicit": record.implicit,
        "topUpOf": record.top_up_of,  # a top-up adds calls to that grant: no token of its own
        # Paid, nothing delivered: why, as the move to OWED said (refunds pay it back).
        "owedToBuyer": _owed(record),
        # The signed offer-receipt receipt the buyer got (docs/offer-receipt.md), if any.
        "receipt": _receipt(record),
    }


def _receipt(record: ChallengeRecord) -> dict[str, Any] | None:
    signed = (record.grant or {}).get("receipt")
    return signed if isinstance(signed, dict) else None


def _owed(record: ChallengeRecord) -> str | None:
    if record.state is not State.OWED:
        return None
    for step in reversed(record.history):
        if step.state is State.OWED:
            return step.reason
    return "owed to the buyer"


def purchase_detail(record: ChallengeRecord, config: Config, now: float) -> dict[str, Any]:
    """A purchase with its history, its payment (no signature) and its grant (no token)."""
    view = purchase_view(record, config, now)
    payment = record.payment
    view["payment"] = (
        None
        if payment is None
        else {
            "payer": payment.payer,
            "nonce": payment.nonce,
            "value": payment.value,
            "validAfter": payment.valid_after,
            "validBefore": payment.valid_before,
            "submitted": payment.submitted,
            "leaseUntil": rfc3339(payment.lease_until),
            "broadcastTxHash": payment.broadcast_tx_hash,
        }
    )
    grant = dict(record.grant) if record.grant is not None else None
    if grant is not None and "accessToken" in grant:
        grant["accessToken"] = "<redacted>"
    view["grant"] = grant
    view["expiresAt"] = rfc3339(record.expires_at)
    view["history"] = [
        {"state": step.state.value, "at": rfc3339(step.at), "reason": step.reason}
        for step in record.history
    ]
    return view


def usage_view(account: CreditAccount | None, calls: int | None) -> dict[str, Any] | None:
    """A metered grant's credits: what was bought (and topped up), spent, refunded, left."""
    if account is None:
        return None
    return {
        "planCalls": calls,
        "balance": account.balance,
        "credited": account.credited,
        "spent": account.spent,
        "refunded": account.refunded,
        "calls": account.calls,
        "topUps": max(0, len(account.entries) - 1),
        "lastHours": [
            {"hour": rfc3339(bucket.start), "calls": bucket.calls, "spent": bucket.spent}
            for bucket in account.usage
        ],
        "usedCalls": [
            {"at": rfc3339(c.at), "route": c.route, "reserved": c.reserved, "charged": c.charged}
            for c in account.used_calls
        ],
    }


def grant_view(
    record: ChallengeRecord,
    config: Config,
    now: float,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A delivered grant: who has it, until when, and what is left of it."""
    view = purchase_view(record, config, now)
    seconds_left = view["secondsLeft"]
    if record.revoked_at is not None:
        status = "revoked"
    elif seconds_left is not None and seconds_left <= 0:
        status = "expired"
    else:
        status = "active"
    view["status"] = status
    view["usage"] = usage  # credits left, spent, calls: plans that sell calls only
    return view


def challenge_view(record: ChallengeRecord, now: float) -> dict[str, Any]:
    """One row of the challenges list (any state)."""
    return {
        "challengeId": record.challenge_id,
        "requestId": record.request_id,
        "planId": record.plan_id,
        "resourceId": record.resource_id,
        "state": record.state.value,
        "amount": record.amount,
        "createdAt": rfc3339(record.created_at),
        "updatedAt": rfc3339(record.updated_at),
        "expiresAt": rfc3339(record.expires_at),
        "expired": record.state is State.PENDING and record.expires_at <= now,
        "cancellable": record.state is State.PENDING,
        "lastReason": record.history[-1].reason if record.history else None,
    }
