"""Small builders for records, payment keys and payments.

Every builder gives fresh random identifiers, so tests sharing one store (or
one Redis) never collide, and takes keyword overrides for whatever a test is
about. Times are fixed around ``BASE_TIME`` because stores never read a clock:
the caller passes ``at``/``now``.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import replace
from typing import Any

from x402srv.access.records import ChallengeRecord, PaymentDetails, PaymentKey, State

__all__ = [
    "BASE_TIME",
    "CHAIN_ID",
    "USDC",
    "make_grant",
    "make_key",
    "make_payment",
    "make_record",
    "new_id",
    "new_tx_hash",
]

#: 2023-11-14T22:13:20Z; any fixed instant does.
BASE_TIME = 1_700_000_000.0
#: Base Sepolia and its USDC, the network the examples use.
CHAIN_ID = 84532
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


def new_id() -> str:
    return str(uuid.uuid4())


def new_tx_hash() -> str:
    return "0x" + secrets.token_hex(32)


def _address() -> str:
    return "0x" + secrets.token_hex(20)


def make_key(
    *,
    chain_id: int = CHAIN_ID,
    asset: str = USDC,
    payer: str | None = None,
    nonce: str | None = None,
) -> PaymentKey:
    """A payment key with a random payer and nonce unless given."""
    return PaymentKey(
        chain_id=chain_id,
        asset=asset,
        payer=payer or _address(),
        nonce=nonce or "0x" + secrets.token_hex(32),
    )


def make_payment(
    key: PaymentKey | None = None, *, attempt_id: str | None = None, **overrides: Any
) -> PaymentDetails:
    """The details a PENDING -> SETTLING transition persists for ``key``."""
    key = key or make_key()
    payment = PaymentDetails(
        payer=key.payer,
        nonce=key.nonce,
        value="100000",
        valid_after=int(BASE_TIME) - 60,
        valid_before=int(BASE_TIME) + 300,
        signature="0x" + secrets.token_hex(65),
        key=str(key),
        attempt_id=attempt_id or new_id(),
        lease_until=BASE_TIME + 120,
    )
    return replace(payment, **overrides)


def make_record(*, state: State = State.PENDING, **overrides: Any) -> ChallengeRecord:
    """A fresh challenge as the pipeline creates it; override any field."""
    at = float(overrides.pop("at", BASE_TIME))
    record = ChallengeRecord(
        challenge_id=new_id(),
        request_id=new_id(),
        plan_id="hourly",
        resource_id="default",
        amount="100000",
        network=f"eip155:{CHAIN_ID}",
        asset=USDC,
        pay_to=_address(),
        max_timeout_seconds=300,
        state=state,
        created_at=at,
        expires_at=at + 900,
        updated_at=at,
    )
    return replace(record, **overrides)


def make_grant(record: ChallengeRecord, **overrides: Any) -> dict[str, Any]:
    """An ``AccessGrant`` body for ``record``, nested values included."""
    grant: dict[str, Any] = {
        "type": "AccessGrant",
        "challengeId": record.challenge_id,
        "requestId": record.request_id,
        "planId": record.plan_id,
        "resourceId": record.resource_id,
        "accessToken": "token-" + secrets.token_urlsafe(24),
        "tokenType": "Bearer",
        "expiresAt": "2023-11-14T23:13:20Z",
        "txHash": record.tx_hash or new_tx_hash(),
        "network": record.network,
        "explorerUrl": None,
        "claims": {"scopes": ["read", "write"], "limits": {"rpm": 60, "burst": 1.5}},
    }
    grant.update(overrides)
    return grant
