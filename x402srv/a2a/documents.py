"""A2A tasks as x402srv keeps them, and the A2A 0.3.0 JSON they are shown as.

``TaskRecord`` is what the store holds (``Store.save_task``, a JSON document
with a compare-and-set version): the purchase it stands for (requestId, plan,
resource, and the challengeId once known), its state, what the agent last said
about the payment, the PaymentRequired it offers, every x402 receipt so far and
the AccessGrant. ``render_task`` turns it into the ``Task`` clients see, the
same on every instance: nothing of it lives in process memory.

Task ids are random UUIDs (122 bits from the OS): ``tasks/get`` answers anyone
who knows the id, and a completed task holds a bearer token.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from ..ids import uuid4_str
from ..offers import rfc3339
from .extension import (
    ERROR_KEY,
    RECEIPTS_KEY,
    REQUIRED_KEY,
    STATUS_KEY,
    ExtensionError,
    PaymentStatus,
)

__all__ = [
    "TERMINAL_STATES",
    "Note",
    "Purchase",
    "TaskRecord",
    "TaskState",
    "catalog_message",
    "new_id",
    "render_task",
]

FORMAT: Final = "x402srv.a2a.task/1"
#: Failed receipts kept per task (successful ones are all kept): a client that keeps
#: sending bad payments cannot grow its task document without bound.
MAX_FAILED_RECEIPTS: Final = 32


class TaskState(StrEnum):
    """The A2A task states this agent uses (no ``submitted``: messages are answered at once)."""

    INPUT_REQUIRED = "input-required"
    WORKING = "working"
    COMPLETED = "completed"
    CANCELED = "canceled"
    FAILED = "failed"


TERMINAL_STATES: Final = frozenset({TaskState.COMPLETED, TaskState.CANCELED, TaskState.FAILED})


def new_id() -> str:
    return uuid4_str()


@dataclass(frozen=True, slots=True)
class Purchase:
    """The access request a task stands for; sent to the pipeline as its body every time."""

    request_id: str
    plan_id: str
    resource_id: str


@dataclass(frozen=True, slots=True)
class Note:
    """What the agent's status message says: text, x402 status, error code, retry hint."""

    text: str
    payment_status: PaymentStatus | None = None
    error: ExtensionError | None = None
    retry_after: int | None = None
    problem: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str
    context_id: str
    purchase: Purchase
    state: TaskState
    note: Note
    updated_at: float
    message_id: str = field(default_factory=new_id)
    challenge_id: str | None = None
    required: dict[str, Any] | None = None
    offer: dict[str, Any] | None = None
    receipts: tuple[dict[str, Any], ...] = ()
    grant: dict[str, Any] | None = None

    def same_as(self, other: TaskRecord) -> bool:
        """Equal but for the status message id and time: such an update is not written."""
        return replace(other, message_id=self.message_id, updated_at=self.updated_at) == self

    def with_receipt(self, receipt: dict[str, Any] | None) -> tuple[dict[str, Any], ...]:
        if receipt is None:
            return self.receipts
        if receipt.get("success"):
            if any(r.get("transaction") == receipt.get("transaction") for r in self.receipts):
                return self.receipts
            return (*self.receipts, receipt)
        failed = [i for i, r in enumerate(self.receipts) if not r.get("success")]
        if len(failed) >= MAX_FAILED_RECEIPTS:  # drop the oldest failure
            oldest = failed[0]
            return (*self.receipts[:oldest], *self.receipts[oldest + 1 :], receipt)
        return (*self.receipts, receipt)

    def to_document(self) -> dict[str, Any]:
        note = self.note
        return {
            "format": FORMAT,
            "taskId": self.task_id,
            "contextId": self.context_id,
            "requestId": self.purchase.request_id,
            "planId": self.purchase.plan_id,
            "resourceId": self.purchase.resource_id,
            "challengeId": self.challenge_id,
            "state": self.state.value,
            "note": {
                "text": note.text,
                "paymentStatus": note.payment_status.value if note.payment_status else None,
                "error": note.error.value if note.error else None,
                "retryAfter": note.retry_after,
                "problem": note.problem,
            },
            "messageId": self.message_id,
            "updatedAt": self.updated_at,
            "required": self.required,
            "offer": self.offer,
            "receipts": list(self.receipts),
            "grant": self.grant,
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> TaskRecord:
        if document.get("format") != FORMAT:
            raise ValueError(f"not an x402srv task document: {document.get('format')!r}")
        note = document["note"]
        return cls(
            task_id=document["taskId"],
            context_id=document["contextId"],
            purchase=Purchase(document["requestId"], document["planId"], document["resourceId"]),
            challenge_id=document["challengeId"],
            state=TaskState(document["state"]),
            note=Note(
                text=note["text"],
                payment_status=PaymentStatus(note["paymentStatus"])
                if note["paymentStatus"]
                else None,
                error=ExtensionError(note["error"]) if note["error"] else None,
                retry_after=note["retryAfter"],
                problem=note["problem"],
            ),
            message_id=document["messageId"],
            updated_at=float(document["updatedAt"]),
            required=document["required"],
            offer=document["offer"],
            receipts=tuple(document["receipts"]),
            grant=document["grant"],
        )


def _text(text: str) -> dict[str, Any]:
    return {"kind": "text", "text": text}


def _data(data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "data", "data": data}


def _status_metadata(record: TaskRecord) -> dict[str, Any]:
    note = record.note
    metadata: dict[str, Any] = {}
    if note.payment_status is not None:
        metadata[STATUS_KEY] = note.payment_status.value
    if record.state is TaskState.INPUT_REQUIRED and record.required is not None:
        metadata[REQUIRED_KEY] = record.required  # also after a failure: pay again
    if note.error is not None:
        metadata[ERROR_KEY] = note.error.value
    if record.receipts or record.state in TERMINAL_STATES:
        metadata[RECEIPTS_KEY] = list(record.receipts)
    if note.retry_after is not None:
        metadata["x402srv.retryAfterSeconds"] = note.retry_after
    if note.problem is not None:
        metadata["x402srv.problem"] = note.problem
    return metadata


def render_task(record: TaskRecord) -> dict[str, Any]:
    """The A2A 0.3.0 ``Task`` for a record (kind, id, contextId, status, artifacts, metadata)."""
    parts = [_text(record.note.text)]
    if record.state is TaskState.INPUT_REQUIRED and record.offer is not None:
        parts.append(_data(record.offer))
    message: dict[str, Any] = {
        "kind": "message",
        "role": "agent",
        "messageId": record.message_id,
        "taskId": record.task_id,
        "contextId": record.context_id,
        "parts": parts,
    }
    metadata = _status_metadata(record)
    if metadata:
        message["metadata"] = metadata
    task: dict[str, Any] = {
        "kind": "task",
        "id": record.task_id,
        "contextId": record.context_id,
        "status": {
            "state": record.state.value,
            "message": message,
            "timestamp": rfc3339(record.updated_at),
        },
        "metadata": {
            "x402srv.requestId": record.purchase.request_id,
            "x402srv.planId": record.purchase.plan_id,
            "x402srv.resourceId": record.purchase.resource_id,
        },
    }
    if record.challenge_id is not None:
        task["metadata"]["x402srv.challengeId"] = record.challenge_id
    if record.grant is not None:
        task["artifacts"] = [
            {
                "artifactId": f"access-grant-{record.grant.get('challengeId', record.task_id)}",
                "name": "AccessGrant",
                "description": "Bearer token for the seller's API (Authorization: Bearer ...)",
                "parts": [_data(record.grant)],
            }
        ]
    return task


def catalog_message(discovery: dict[str, Any], context_id: str) -> dict[str, Any]:
    """The answer to a message that names no plan: every plan, as a data part (no task)."""
    plans = discovery.get("plans", [])
    listing = "; ".join(
        f"{plan['planId']}: {plan['unitAmount']} ({plan['description']})" for plan in plans
    )
    text = (
        f"Plans: {listing}. To buy one, send a message with a data part "
        '{"planId": "<plan>"} (or name the plan in text); the answer is a task asking '
        "for an x402 payment."
    )
    return {
        "kind": "message",
        "role": "agent",
        "messageId": new_id(),
        "contextId": context_id,
        "parts": [_text(text), _data(discovery)],
        "metadata": {"x402srv.skill": "discover-products"},
    }
