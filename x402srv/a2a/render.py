"""The A2A 0.3 JSON a stored task is shown as: Task, status, history, stream events.

Every answer is built here from a ``TaskRecord`` and nothing else, so any worker
shows a task the same way. The 1.0 shapes are made from these by ``v1`` (a
mechanical translation), so the two protocol versions never disagree on what a
task says.
"""

from __future__ import annotations

from typing import Any, Final

from x402srv.a2a.documents import TERMINAL_STATES, TaskRecord, TaskState
from x402srv.a2a.extension import ERROR_KEY, RECEIPTS_KEY, REQUIRED_KEY, STATUS_KEY
from x402srv.wire.offers import rfc3339

__all__ = [
    "STREAM_ENDS",
    "artifact_event",
    "artifacts",
    "catalog_text",
    "data_part",
    "render_task",
    "status_event",
    "status_of",
    "text_part",
    "timeline",
]

#: States after which a stream closes: final, or waiting for the client.
STREAM_ENDS: Final = TERMINAL_STATES | {TaskState.INPUT_REQUIRED}


def text_part(text: str) -> dict[str, Any]:
    return {"kind": "text", "text": text}


def data_part(data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "data", "data": data}


def catalog_text(discovery: dict[str, Any]) -> str:
    plans = discovery.get("plans", [])
    listing = "; ".join(
        f"{plan['planId']}: {plan['unitAmount']} ({plan['description']})" for plan in plans
    )
    return (
        f"Plans: {listing}. Which plan do you want? Name it on this task (a data part "
        '{"planId": "<plan>"}, or text naming the plan) to get its payment request, or pay '
        "one of x402.payment.required.accepts directly."
    )


def _status_metadata(record: TaskRecord) -> dict[str, Any]:
    note = record.note
    metadata: dict[str, Any] = {}
    if note.catalog:
        metadata["x402srv.skill"] = "discover-products"
    if note.payment_status is not None:
        metadata[STATUS_KEY] = note.payment_status.value
    if record.state is TaskState.INPUT_REQUIRED and record.required is not None:
        metadata[REQUIRED_KEY] = record.required  # also after a failure: pay again
    if note.error is not None:
        metadata[ERROR_KEY] = note.error.value
    if record.receipts or record.state in TERMINAL_STATES:
        metadata[RECEIPTS_KEY] = list(record.receipts)
    if note.tx_hash is not None:
        metadata["x402srv.txHash"] = note.tx_hash
    if note.refund_tx_hash is not None:
        metadata["x402srv.refundTxHash"] = note.refund_tx_hash
    if note.retry_after is not None:
        metadata["x402srv.retryAfterSeconds"] = note.retry_after
    if note.problem is not None:
        metadata["x402srv.problem"] = note.problem
    return metadata


def status_of(record: TaskRecord) -> dict[str, Any]:
    """The task's current ``TaskStatus``: state, the agent's message, time."""
    parts = [text_part(record.note.text)]
    if record.state is TaskState.INPUT_REQUIRED and record.offer is not None:
        parts.append(data_part(record.offer))
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
    return {
        "state": record.state.value,
        "message": message,
        "timestamp": rfc3339(record.updated_at),
    }


def timeline(record: TaskRecord) -> list[dict[str, Any]]:
    """Every status the task still remembers, oldest first, the current one last."""
    past = [entry["status"] for entry in record.log if "status" in entry]
    return [*past, status_of(record)]


def _history(record: TaskRecord, length: int | None) -> list[dict[str, Any]]:
    messages = [entry.get("user") or entry["status"]["message"] for entry in record.log]
    return messages if length is None else messages[-length:]


def artifacts(record: TaskRecord) -> list[dict[str, Any]]:
    if record.grant is None:
        return []
    return [
        {
            "artifactId": f"access-grant-{record.grant.get('challengeId', record.task_id)}",
            "name": "AccessGrant",
            "description": "Bearer token for the seller's API (Authorization: Bearer ...)",
            "parts": [data_part(record.grant)],
        }
    ]


def render_task(record: TaskRecord, history_length: int | None = None) -> dict[str, Any]:
    """The A2A 0.3.0 ``Task``; ``history_length`` as A2A says (None: all kept, 0: none)."""
    task: dict[str, Any] = {
        "kind": "task",
        "id": record.task_id,
        "contextId": record.context_id,
        "status": status_of(record),
    }
    if history_length != 0:
        task["history"] = _history(record, history_length)
    metadata: dict[str, Any] = {}
    if record.purchase is not None:
        metadata = {
            "x402srv.requestId": record.purchase.request_id,
            "x402srv.planId": record.purchase.plan_id,
            "x402srv.resourceId": record.purchase.resource_id,
        }
    if record.challenge_id is not None:
        metadata["x402srv.challengeId"] = record.challenge_id
    if metadata:
        task["metadata"] = metadata
    granted = artifacts(record)
    if granted:
        task["artifacts"] = granted
    return task


def status_event(record: TaskRecord, status: dict[str, Any], *, final: bool) -> dict[str, Any]:
    return {
        "kind": "status-update",
        "taskId": record.task_id,
        "contextId": record.context_id,
        "status": status,
        "final": final,
    }


def artifact_event(record: TaskRecord, artifact: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "artifact-update",
        "taskId": record.task_id,
        "contextId": record.context_id,
        "artifact": artifact,
        "lastChunk": True,
    }
