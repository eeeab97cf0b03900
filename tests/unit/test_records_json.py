"""A record's JSON form (``to_dict``) is written out by hand; it must track the fields."""

from __future__ import annotations

import dataclasses

from x402srv.access.records import ChallengeRecord, Offer, PaymentDetails, State, Transition
from x402srv.testing.builders import make_grant, make_record


def _full_record() -> ChallengeRecord:
    record = make_record(state=State.DELIVERED, implicit=True, payer="0x" + "22" * 20)
    payment = PaymentDetails(
        payer="0x" + "22" * 20,
        nonce="0x" + "33" * 32,
        value="100000",
        valid_after=0,
        valid_before=2_000_000_000,
        signature="0x" + "44" * 65,
        key="31337:asset:payer:nonce",
        attempt_id="a" * 32,
        lease_until=1.5,
        broadcast_tx_hash="0x" + "55" * 32,
        submitted=True,
    )
    history = (Transition(State.PENDING, 1.0, "challenge created"),)
    options = (Offer("eip155:1", "0x" + "66" * 20, "1"), Offer("eip155:2", "0x" + "77" * 20, "2"))
    record = dataclasses.replace(
        record, payment=payment, tx_hash="0x" + "55" * 32, history=history, options=options
    )
    return dataclasses.replace(record, grant=make_grant(record))


def test_to_dict_is_what_asdict_made() -> None:
    record = _full_record()
    expected = dataclasses.asdict(record)
    expected["state"] = record.state.value
    expected["history"] = [
        {"state": t.state.value, "at": t.at, "reason": t.reason} for t in record.history
    ]
    expected["options"] = [dataclasses.asdict(offer) for offer in record.options]
    data = record.to_dict()
    assert data == expected
    assert list(data) == [f.name for f in dataclasses.fields(ChallengeRecord)]
    assert list(data["payment"]) == [f.name for f in dataclasses.fields(PaymentDetails)]


def test_to_dict_round_trips_and_copies_the_grant() -> None:
    record = _full_record()
    data = record.to_dict()
    assert ChallengeRecord.from_dict(data) == record
    assert record.grant is not None
    data["grant"]["accessToken"] = "changed"
    assert record.grant["accessToken"] != "changed"
