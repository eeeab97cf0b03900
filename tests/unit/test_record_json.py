"""A record's stored JSON, written field by field, is ``json.dumps`` of ``to_dict`` to the byte."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from x402srv.access.records import ChallengeRecord, Offer, State, Transition
from x402srv.stores.rules import decode_record, encode_record
from x402srv.testing.builders import BASE_TIME, make_grant, make_payment, make_record, new_tx_hash


def reference(record: ChallengeRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"), allow_nan=False)


def delivered() -> ChallengeRecord:
    record = make_record(state=State.DELIVERED, payer="0x" + "ab" * 20, tx_hash=new_tx_hash())
    history = (
        Transition(State.PENDING, BASE_TIME, "challenge created"),
        Transition(State.SETTLING, BASE_TIME + 1.25, "payment claimed"),
        Transition(State.DELIVERED, BASE_TIME + 2, 'grant "issued" ü'),
    )
    return replace(record, grant=make_grant(record), payment=make_payment(), history=history)


RECORDS: dict[str, Any] = {
    "new challenge": lambda: make_record(
        history=(Transition(State.PENDING, BASE_TIME, "created"),)
    ),
    "implicit, settling": lambda: make_record(
        state=State.SETTLING, implicit=True, payment=make_payment(broadcast_tx_hash="0x1")
    ),
    "delivered": delivered,
    "options, calls, top-up, revoked": lambda: make_record(
        options=(Offer("eip155:1", "0xA", "7"), Offer("solana:x", "So1", "8")),
        calls=100,
        top_up_of="c-1",
        revoked_at=BASE_TIME + 0.1,
    ),
    "escaped text": lambda: make_record(
        resource_id='city:/"paris"\\ \n\x00 ünïcode \U0001f600 \ud800', plan_id="dai\tly"
    ),
    "whole numbers and odd floats": lambda: make_record(
        at=0, created_at=1, expires_at=1e300, updated_at=-0.0, max_timeout_seconds=0
    ),
}


@pytest.mark.parametrize("kind", list(RECORDS))
def test_encoded_record_is_the_compact_json_of_to_dict(kind: str) -> None:
    record = RECORDS[kind]()
    text = encode_record(record)
    assert text == reference(record)
    assert decode_record(text) == record


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_time_that_is_not_a_number_fails_as_before(value: float) -> None:
    with pytest.raises(ValueError, match="Out of range float values"):
        encode_record(make_record(updated_at=value))


def test_a_value_of_another_type_is_written_as_the_encoder_writes_it() -> None:
    record = make_record(updated_at=True, calls=False, implicit=1, plan_id=None, amount=7)
    assert encode_record(record) == reference(record)


def test_a_grant_that_is_not_json_fails_as_before() -> None:
    record = make_record(grant={"bad": object()})
    with pytest.raises(TypeError):
        encode_record(record)
