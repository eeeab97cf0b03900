"""``encode_record``: the JSON text every store keeps for a record, written field by field.

It is exactly ``json.dumps(record.to_dict(), separators=(",", ":"),
allow_nan=False)`` (tests/unit/test_record_json.py compares the two on every
kind of record), written without building the dictionary first: every unpaid
request stores a new record, and building and walking the dictionary cost twice
what writing the text does. Strings go through the encoder's own
``encode_basestring_ascii``, numbers through ``float.__repr__``/``int.__repr__``
as the encoder writes them; the payment and the grant, nested documents, through
the encoder itself. A value the encoder would treat otherwise (a NaN, an
unexpected type) sends the whole record the encoder's way, errors included.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _string

from x402srv.access.records import ChallengeRecord

__all__ = ["encode_record"]

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class _Unusual(Exception):
    """A value the direct path does not write: the encoder writes the record."""


def _number(value: float | None) -> str:
    kind = type(value)
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return float.__repr__(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    raise _Unusual


def _text(value: str | None) -> str:
    if type(value) is str:
        return _string(value)
    if value is None:
        return "null"
    raise _Unusual


def _flag(value: bool) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise _Unusual


def encode_record(record: ChallengeRecord) -> str:
    """The record's JSON, as every store keeps it (``ChallengeRecord.to_dict``'s keys in order)."""
    try:
        return _direct(record)
    except (_Unusual, TypeError):
        return _ENCODER.encode(record.to_dict())


def _direct(r: ChallengeRecord) -> str:
    # Fields that are always strings go to ``_string`` as they are: anything else
    # makes it raise TypeError, and the record takes the encoder's way.
    payment = "null" if r.payment is None else _ENCODER.encode(r.payment.to_dict())
    grant = "null" if r.grant is None else _ENCODER.encode(r.grant)
    history = ",".join(
        f'{{"state":{_string(t.state.value)},"at":{_number(t.at)},"reason":{_string(t.reason)}}}'
        for t in r.history
    )
    options = ",".join(
        f'{{"network":{_string(o.network)},"asset":{_string(o.asset)},'
        f'"amount":{_string(o.amount)}}}'
        for o in r.options
    )
    return (
        f'{{"challenge_id":{_string(r.challenge_id)},"request_id":{_string(r.request_id)},'
        f'"plan_id":{_string(r.plan_id)},"resource_id":{_string(r.resource_id)},'
        f'"amount":{_string(r.amount)},"network":{_string(r.network)},'
        f'"asset":{_string(r.asset)},"pay_to":{_string(r.pay_to)},'
        f'"max_timeout_seconds":{_number(r.max_timeout_seconds)},'
        f'"state":{_string(r.state.value)},"created_at":{_number(r.created_at)},'
        f'"expires_at":{_number(r.expires_at)},"updated_at":{_number(r.updated_at)},'
        f'"implicit":{_flag(r.implicit)},"payment":{payment},"payer":{_text(r.payer)},'
        f'"tx_hash":{_text(r.tx_hash)},"grant":{grant},"history":[{history}],'
        f'"options":[{options}],"calls":{_number(r.calls)},"top_up_of":{_text(r.top_up_of)},'
        f'"revoked_at":{_number(r.revoked_at)}}}'
    )
