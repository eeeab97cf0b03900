"""What a client's message asks for, read the same way for every version of A2A.

A message without an x402 status asks for the catalog or names a plan, whether
it opens a task or continues one:

- a data part with ``planId`` (and maybe ``requestId``, ``resourceId``): that plan,
  those fields read exactly as the ``POST /x402/access`` body;
- else text that names exactly one plan id as a word ("Buy the hourly plan"): that
  plan;
- else (no plan, or several named): no plan.

A message on a task may carry the x402 extension's ``x402.payment.status``:
``payment-submitted`` with ``x402.payment.payload`` (a v2 PaymentPayload, checked
by ``protocol.parse_payment_payload`` like the ``PAYMENT-SIGNATURE`` header) or
``payment-rejected``. Anything malformed is -32602 and changes nothing.

Only such a submission, well formed and on a task, is a payment: every other
call counts against the client's unpaid-request limit (``is_payment_submission``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from x402srv.a2a.extension import PAYLOAD_KEY, STATUS_KEY, PaymentStatus
from x402srv.a2a.jsonrpc import INVALID_PARAMS, RpcError
from x402srv.a2a.outcomes import rpc_error
from x402srv.a2a.wire import DataPart, Message, TextPart
from x402srv.errors import InvalidRequest
from x402srv.wire.protocol import AccessBody, PaymentPayload, access_body, parse_payment_payload

__all__ = [
    "NoPlan",
    "PaymentRejected",
    "PaymentSubmitted",
    "PlanChosen",
    "is_payment_submission",
    "read_followup",
    "read_request",
]

_BODY_KEYS = ("planId", "requestId", "resourceId")


@dataclass(frozen=True, slots=True)
class NoPlan:
    """No single plan named: the catalog (again)."""


@dataclass(frozen=True, slots=True)
class PlanChosen:
    body: AccessBody


@dataclass(frozen=True, slots=True)
class PaymentSubmitted:
    payment: PaymentPayload

    @property
    def plan_id(self) -> str | None:
        return self.payment.extra_str("planId")

    def made_for_another(self, challenge_id: str | None, request_id: str | None) -> bool:
        """The payment names (in ``accepted.extra``) a challenge that is not this task's.

        Over HTTP those ids route a payment to its challenge; on a task the task
        says which challenge is paid, so a payment made for another payment
        request (another task's, or one that never existed) is not this task's.
        """
        named = self.payment.extra_str("challengeId")
        named_request = self.payment.extra_str("requestId")
        return (named is not None and named != challenge_id) or (
            named_request is not None and named_request != request_id
        )


@dataclass(frozen=True, slots=True)
class PaymentRejected:
    """The client declines to pay: the task is canceled."""


def _status(message: Message) -> str | None:
    value = (message.metadata or {}).get(STATUS_KEY)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RpcError(INVALID_PARAMS, {"detail": f"{STATUS_KEY} must be a string"})
    return value


def _named_plans(texts: Iterable[str], plan_ids: Iterable[str]) -> list[str]:
    text = " ".join(texts)
    return [
        plan_id
        for plan_id in plan_ids
        if re.search(rf"(?<![\w.-]){re.escape(plan_id)}(?![\w.-])", text, re.IGNORECASE)
    ]


def _body(fields: dict[str, Any]) -> AccessBody:
    """The data part's fields, validated exactly as the HTTP body's are."""
    try:
        return access_body(fields)
    except InvalidRequest as exc:
        raise rpc_error(exc) from None


#: Doubles represent every integer up to here exactly.
_EXACT_DOUBLE = 2**53


def _whole_numbers(value: Any) -> Any:
    """Integral floats back to integers (``2.0`` -> ``2``), everywhere in a JSON value.

    The ``a2a-sdk`` client carries message metadata through a protobuf ``Struct``,
    whose numbers are doubles: the PaymentPayload it sends has ``"x402Version": 2.0``
    and ``"maxTimeoutSeconds": 300.0``. Those are the same JSON numbers; the strict
    x402 parser still sees everything else exactly as the client wrote it.
    """
    if isinstance(value, float) and value.is_integer() and abs(value) <= _EXACT_DOUBLE:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def _plan(message: Message, plan_ids: Iterable[str]) -> NoPlan | PlanChosen:
    for part in message.parts:
        if isinstance(part, DataPart) and "planId" in part.data:
            return PlanChosen(_body({k: part.data[k] for k in _BODY_KEYS if k in part.data}))
    texts = [part.text for part in message.parts if isinstance(part, TextPart)]
    named = _named_plans(texts, plan_ids)
    if len(named) == 1:
        return PlanChosen(AccessBody(named[0], None, "default"))
    return NoPlan()


def read_request(message: Message, plan_ids: Iterable[str]) -> NoPlan | PlanChosen:
    """A message that opens a task."""
    if _status(message) is not None:
        raise RpcError(
            INVALID_PARAMS,
            {
                "detail": f"{STATUS_KEY} belongs on a message that names the taskId of the "
                "task asking for the payment"
            },
        )
    return _plan(message, plan_ids)


def read_followup(
    message: Message, plan_ids: Iterable[str]
) -> PaymentSubmitted | PaymentRejected | NoPlan | PlanChosen:
    """A message on an existing task."""
    status = _status(message)
    if status is None:
        return _plan(message, plan_ids)
    if status == PaymentStatus.REJECTED:
        return PaymentRejected()
    if status != PaymentStatus.SUBMITTED:
        raise RpcError(
            INVALID_PARAMS,
            {"detail": f"{STATUS_KEY} from a client is 'payment-submitted' or 'payment-rejected'"},
        )
    metadata = message.metadata or {}
    if PAYLOAD_KEY not in metadata:
        raise RpcError(
            INVALID_PARAMS, {"detail": f"payment-submitted needs {PAYLOAD_KEY} (a PaymentPayload)"}
        )
    try:
        payment = parse_payment_payload(_whole_numbers(metadata[PAYLOAD_KEY]), where=PAYLOAD_KEY)
    except InvalidRequest as exc:
        raise rpc_error(exc) from None
    return PaymentSubmitted(payment)


def is_payment_submission(message: Any) -> bool:
    """Whether a raw message (0.3 or 1.0) submits a payment that can be tried.

    A ``taskId``, ``x402.payment.status`` 'payment-submitted' and a payload that
    parses as a PaymentPayload: the message ``read_followup`` reads as
    ``PaymentSubmitted``. Only such a message goes uncounted by the unpaid-request
    limit (and counts once it fails); a bare ``x402.payment.payload`` key, any
    other status or a payload that does not parse is an unpaid call like any
    other, however it is answered.
    """
    if not isinstance(message, dict) or not message.get("taskId"):
        return False
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get(STATUS_KEY) != PaymentStatus.SUBMITTED:
        return False
    if PAYLOAD_KEY not in metadata:
        return False
    try:
        parse_payment_payload(_whole_numbers(metadata[PAYLOAD_KEY]), where=PAYLOAD_KEY)
    except InvalidRequest:
        return False
    return True
