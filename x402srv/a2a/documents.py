"""A2A tasks as x402srv keeps them in the configured store.

``TaskRecord`` is what the store holds (``Store.save_task``, a JSON document
with a compare-and-set version): the purchase it stands for (requestId, plan,
resource; none yet while the task shows the catalog and waits for a plan), its
state, what the agent last said about the payment, the PaymentRequired it
offers, every x402 receipt so far, the AccessGrant, and a bounded ``log``.

The log is the task's past, oldest first: the user messages it took and every
status it had before the current one. ``history`` is read from it, and so are
the events of a stream: a stream on any worker replays the statuses it has not
sent yet, so a step that came and went between two reads of the store is still
shown. Nothing of a task lives in process memory.

Task ids are random UUIDs (122 bits from the OS): ``tasks/get`` answers anyone
who knows the id, and a completed task holds a bearer token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from x402srv.a2a.extension import ExtensionError, PaymentStatus
from x402srv.access.ids import uuid4_str

__all__ = [
    "MAX_LOG",
    "TERMINAL_STATES",
    "Note",
    "Purchase",
    "TaskRecord",
    "TaskState",
    "new_id",
]

FORMAT: Final = "x402srv.a2a.task/2"
#: Documents written before the log existed (every one of them has a purchase).
FORMAT_1: Final = "x402srv.a2a.task/1"
#: Failed receipts kept per task (successful ones are all kept): a client that keeps
#: sending bad payments cannot grow its task document without bound.
MAX_FAILED_RECEIPTS: Final = 32
#: Log entries kept per task (the oldest go first), for the same reason.
MAX_LOG: Final = 24
#: A user message larger than this is logged without its parts.
MAX_LOGGED_MESSAGE: Final = 8192


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
    """What the agent's status message says: text, x402 status, error code, hints.

    ``catalog`` marks the status of a task that waits for a plan (it shows every
    plan); ``tx_hash`` is a settlement's transaction as soon as it is broadcast.
    """

    text: str
    payment_status: PaymentStatus | None = None
    error: ExtensionError | None = None
    retry_after: int | None = None
    problem: dict[str, Any] | None = None
    catalog: bool = False
    tx_hash: str | None = None
    #: The refund's transaction, on the message of a task whose purchase was refunded.
    refund_tx_hash: str | None = None


def _note_document(note: Note) -> dict[str, Any]:
    return {
        "text": note.text,
        "paymentStatus": note.payment_status.value if note.payment_status else None,
        "error": note.error.value if note.error else None,
        "retryAfter": note.retry_after,
        "problem": note.problem,
        "catalog": note.catalog,
        "txHash": note.tx_hash,
        "refundTxHash": note.refund_tx_hash,
    }


def _note(document: dict[str, Any]) -> Note:
    status, error = document["paymentStatus"], document["error"]
    return Note(
        text=document["text"],
        payment_status=PaymentStatus(status) if status else None,
        error=ExtensionError(error) if error else None,
        retry_after=document["retryAfter"],
        problem=document["problem"],
        catalog=bool(document.get("catalog", False)),
        tx_hash=document.get("txHash"),
        refund_tx_hash=document.get("refundTxHash"),
    )


def loggable(message: dict[str, Any]) -> dict[str, Any]:
    """A user message as the log keeps it: small, and without a payment's signature.

    The signed authorization is a bearer instrument until it settles; the
    receipts say what became of it. An oversized message keeps its ids only.
    """
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and "x402.payment.payload" in metadata:
        kept = {k: v for k, v in metadata.items() if k != "x402.payment.payload"}
        message = {**message, "metadata": kept}
    size = len(json.dumps(message, separators=(",", ":")))
    if size > MAX_LOGGED_MESSAGE:
        note = {"kind": "text", "text": f"(a message of {size} bytes, not kept)"}
        message = {
            **{k: v for k, v in message.items() if k != "metadata"},
            "parts": [note],
        }
    return message


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str
    context_id: str
    purchase: Purchase | None
    state: TaskState
    note: Note
    updated_at: float
    message_id: str = field(default_factory=new_id)
    challenge_id: str | None = None
    required: dict[str, Any] | None = None
    offer: dict[str, Any] | None = None
    receipts: tuple[dict[str, Any], ...] = ()
    grant: dict[str, Any] | None = None
    #: ``{"user": message}`` and ``{"status": TaskStatus}`` entries, oldest first (0.3 JSON).
    log: tuple[dict[str, Any], ...] = ()

    def same_as(self, other: TaskRecord) -> bool:
        """Equal but for the status message id and time: such an update is not written."""
        return replace(other, message_id=self.message_id, updated_at=self.updated_at) == self

    def logged(self, *entries: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        return (*self.log, *entries)[-MAX_LOG:]

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
        purchase = self.purchase
        return {
            "format": FORMAT,
            "taskId": self.task_id,
            "contextId": self.context_id,
            "requestId": purchase.request_id if purchase else None,
            "planId": purchase.plan_id if purchase else None,
            "resourceId": purchase.resource_id if purchase else None,
            "challengeId": self.challenge_id,
            "state": self.state.value,
            "note": _note_document(self.note),
            "messageId": self.message_id,
            "updatedAt": self.updated_at,
            "required": self.required,
            "offer": self.offer,
            "receipts": list(self.receipts),
            "grant": self.grant,
            "log": list(self.log),
        }

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> TaskRecord:
        if document.get("format") not in (FORMAT, FORMAT_1):
            raise ValueError(f"not an x402srv task document: {document.get('format')!r}")
        purchase = None
        if document["requestId"] is not None:
            purchase = Purchase(document["requestId"], document["planId"], document["resourceId"])
        return cls(
            task_id=document["taskId"],
            context_id=document["contextId"],
            purchase=purchase,
            challenge_id=document["challengeId"],
            state=TaskState(document["state"]),
            note=_note(document["note"]),
            message_id=document["messageId"],
            updated_at=float(document["updatedAt"]),
            required=document["required"],
            offer=document["offer"],
            receipts=tuple(document["receipts"]),
            grant=document["grant"],
            log=tuple(document.get("log", ())),
        )
