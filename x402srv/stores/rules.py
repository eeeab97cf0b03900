"""The decisions every built-in store makes inside its atomic step.

The memory and sqlite stores differ in how they make a step atomic (a lock, a
``BEGIN IMMEDIATE`` transaction), not in what they decide. Keeping the checks
here, as pure functions over what the store has already loaded, means the two
cannot drift apart. The redis plugin checks states with them too and repeats
the claim rules in Lua, where they must run atomically (``x402srv_redis.scripts``);
``x402srv.testing.store_contract`` pins the same rules for every store.

Records are kept as the JSON of ``ChallengeRecord.to_dict`` so that every store
holds the same document, and a grant that is not JSON fails in the memory store
exactly as it would in a durable one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from x402srv.access.records import ALLOWED_TRANSITIONS, ChallengeRecord, State
from x402srv.interfaces import PaymentClaimed, StateMismatch, TransitionRequest, TxClaimed
from x402srv.stores.record_json import encode_record

__all__ = [
    "check_state",
    "claim_conflict",
    "claim_keys",
    "decode_record",
    "decode_task",
    "encode_record",
    "encode_task",
    "key_to_release",
    "nameable",
    "payer_of",
    "state_values",
    "tx_claim_key",
]


def check_state(record: ChallengeRecord | None, request: TransitionRequest) -> StateMismatch | None:
    """Compare-and-set precondition: ``None`` means the move may go ahead.

    A disallowed move is a bug in the caller, not a race, so it raises instead
    of returning a result the pipeline would have to interpret.
    """
    if record is None:
        return StateMismatch(None)
    if record.state != request.expect:
        return StateMismatch(record)
    if request.attempt_id is not None and (
        record.payment is None or record.payment.attempt_id != request.attempt_id
    ):
        return StateMismatch(record)
    if (request.expect, request.to) not in ALLOWED_TRANSITIONS:
        raise ValueError(f"transition {request.expect} -> {request.to} is not allowed")
    return None


def claim_conflict(
    challenge_id: str, payment_owner: str | None, tx_owner: str | None
) -> PaymentClaimed | TxClaimed | None:
    """A claim owned by another challenge stops the move; our own claim is fine."""
    if payment_owner is not None and payment_owner != challenge_id:
        return PaymentClaimed(payment_owner)
    if tx_owner is not None and tx_owner != challenge_id:
        return TxClaimed(tx_owner)
    return None


def claim_keys(request: TransitionRequest) -> tuple[str | None, str | None]:
    """The payment claim and the txHash claim a transition takes, as stored keys (or None)."""
    payment = str(request.claim_payment) if request.claim_payment is not None else None
    tx = tx_claim_key(request.claim_tx_hash) if request.claim_tx_hash else None
    return payment, tx


def key_to_release(record: ChallengeRecord, request: TransitionRequest) -> str | None:
    """The claim a ``release_payment`` frees: the one of the payment being abandoned."""
    if not request.release_payment or record.payment is None:
        return None
    return record.payment.key.lower()


def tx_claim_key(tx_hash: str) -> str:
    """txHashes are compared case-insensitively (explorers and RPCs disagree on case)."""
    return tx_hash.lower()


def nameable(key: str) -> bool:
    """Whether ``key`` can name anything a store holds: it must encode as UTF-8.

    A lone surrogate (``"\\ud800"``) cannot be written to sqlite or sent to
    Redis, so no record, claim or task can be stored under it; lookups answer
    ``None`` for it instead of raising in the driver's encoder, and a request
    that carries one gets "not found" rather than a 500. NUL and long keys
    encode fine and simply name nothing.
    """
    if key.isascii():  # O(1) in CPython, and what every real id is
        return True
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def payer_of(record: ChallengeRecord) -> str | None:
    """The address ``find_challenges(payer=...)`` files a record under, in lowercase.

    The settled payer once there is one, else the payer of the payment being
    settled (SETTLING), else none (a payment released back to PENDING leaves
    no payer behind).
    """
    payer = record.payer or (record.payment.payer if record.payment is not None else None)
    return payer.lower() if payer else None


def state_values(states: Sequence[State]) -> list[str]:
    """Distinct state names in the order given: what listing and pruning filter on."""
    return list(dict.fromkeys(State(s).value for s in states))


def decode_record(text: str) -> ChallengeRecord:
    return ChallengeRecord.from_dict(json.loads(text))


def encode_task(document: Mapping[str, Any]) -> str:
    """A task document as stored: strict JSON, so NaN or a non-JSON value fails before any write."""
    return json.dumps(dict(document), separators=(",", ":"), allow_nan=False)


def decode_task(text: str) -> dict[str, Any]:
    document = json.loads(text)
    if not isinstance(document, dict):
        raise ValueError("a stored task document is not a JSON object")
    return document
