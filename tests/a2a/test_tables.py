"""The A2A layer's tables and folding rules, checked without a server.

The error-code table must cover every reason our own checks and settlers give
(a new reason would otherwise silently become SETTLEMENT_FAILED), and the task
folding rules are what keep concurrent answers from losing a grant; both are
pure, so they are tested directly here and end to end in the other modules.
"""

from __future__ import annotations

import pytest

from x402srv.a2a import v1
from x402srv.a2a.documents import (
    MAX_LOG,
    TERMINAL_STATES,
    Note,
    Purchase,
    TaskRecord,
    TaskState,
    loggable,
)
from x402srv.a2a.extension import REASON_CODES, ExtensionError, activated_extensions, error_code
from x402srv.a2a.jsonrpc import RpcError
from x402srv.a2a.outcomes import Update, apply, canceled, from_problem
from x402srv.a2a.versions import Version, version_of
from x402srv.errors import ChallengeExpired, PaymentFailed, SettlementPending, SettlerUnavailable
from x402srv.wire.reasons import Reason

NETWORK = "eip155:31337"


def test_every_reason_we_raise_has_a_code() -> None:
    """Every x402 reason x402srv itself gives maps to an extension error code."""
    missing = {reason.value for reason in Reason} - set(REASON_CODES)
    assert not missing, sorted(missing)


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("invalid_exact_evm_insufficient_balance", "INSUFFICIENT_FUNDS"),
        ("invalid_exact_evm_payload_signature", "INVALID_SIGNATURE"),
        ("invalid_exact_evm_payload_authorization_valid_before", "EXPIRED_PAYMENT"),
        ("invalid_exact_evm_nonce_already_used", "DUPLICATE_NONCE"),
        ("invalid_network", "NETWORK_MISMATCH"),
        ("invalid_exact_evm_payload_authorization_value_mismatch", "INVALID_AMOUNT"),
        ("transaction_failed", "SETTLEMENT_FAILED"),
        ("something_new_from_a_facilitator", "SETTLEMENT_FAILED"),
    ],
)
def test_reason_to_code(reason: str, code: str) -> None:
    assert error_code(reason) == ExtensionError(code)


def test_only_the_x402_extension_is_activated() -> None:
    uri = "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2"
    assert activated_extensions([f" urn:a ,{uri}", "urn:b"]) == [uri]
    assert activated_extensions(["urn:a"]) == []
    assert activated_extensions([]) == []


def _task(state: TaskState) -> TaskRecord:
    return TaskRecord(
        task_id="t",
        context_id="c",
        purchase=Purchase("r", "hourly", "default"),
        state=state,
        note=Note(text="before"),
        updated_at=1.0,
    )


GRANTED = Update(
    state=TaskState.COMPLETED,
    note=Note(text="paid"),
    receipt={"success": True, "transaction": "0xabc", "network": NETWORK},
    grant={"type": "AccessGrant", "challengeId": "ch"},
)


def test_no_settler_reachable_keeps_the_task_payable_with_a_retry_hint() -> None:
    """503 SETTLER_UNAVAILABLE: the payment is fine, so the task waits for it again."""
    update = from_problem(SettlerUnavailable("no settler", retry_after=10), NETWORK)
    assert update.state is TaskState.INPUT_REQUIRED
    assert update.state not in TERMINAL_STATES
    assert update.note.error is ExtensionError.SETTLEMENT_FAILED
    assert update.note.retry_after == 10
    assert update.note.problem is not None
    assert update.note.problem["code"] == "SETTLER_UNAVAILABLE"
    assert update.receipt is not None and update.receipt["success"] is False


def test_completed_is_final() -> None:
    done = apply(_task(TaskState.INPUT_REQUIRED), GRANTED, 2.0)
    assert done is not None and done.state is TaskState.COMPLETED
    late_failure = from_problem(PaymentFailed("transaction_failed"), NETWORK)
    for update in (late_failure, canceled(rejected=True), GRANTED):
        assert apply(done, update, 3.0) is None


def test_a_transfer_wins_over_a_cancel_that_raced_it() -> None:
    """A payment the chain shows always ends in a grant on its task (docs/protocol/states.md)."""
    for state in (TaskState.CANCELED, TaskState.FAILED):
        done = apply(_task(state), GRANTED, 2.0)
        assert done is not None
        assert done.state is TaskState.COMPLETED
        assert done.grant == GRANTED.grant
    for update in (canceled(rejected=False), from_problem(ChallengeExpired("x"), NETWORK)):
        assert apply(_task(TaskState.CANCELED), update, 2.0) is None


def test_receipts_accumulate_without_duplicates() -> None:
    failed = from_problem(PaymentFailed("invalid_exact_evm_insufficient_balance"), NETWORK)
    task = _task(TaskState.INPUT_REQUIRED)
    for n in range(40):
        receipt = {**(failed.receipt or {}), "attempt": n}  # each failure its own receipt
        changed = apply(task, Update(failed.state, failed.note, receipt=receipt), 2.0)
        assert changed is not None
        task = changed
    assert len(task.receipts) == 32  # failed receipts are bounded, the latest kept
    assert [r["attempt"] for r in task.receipts] == list(range(8, 40))
    done = apply(task, GRANTED, 3.0)
    assert done is not None
    assert [r["success"] for r in done.receipts].count(True) == 1
    assert done.receipts[-1] == GRANTED.receipt
    assert TaskRecord.from_document(done.to_document()) == done


def test_an_unchanged_answer_is_not_written_again() -> None:
    pending = from_problem(SettlementPending("later", retry_after=5), NETWORK)
    working = apply(_task(TaskState.INPUT_REQUIRED), pending, 2.0)
    assert working is not None and working.state is TaskState.WORKING
    assert apply(working, pending, 9.0) is None


# ------------------------------------------------------------------ the task log


def test_the_log_is_bounded_and_keeps_no_payment_signature() -> None:
    task = _task(TaskState.INPUT_REQUIRED)
    pay = {
        "kind": "message",
        "messageId": "m",
        "role": "user",
        "parts": [],
        "metadata": {"x402.payment.status": "payment-submitted", "x402.payment.payload": {"x": 1}},
    }
    logged = loggable(pay)
    assert logged["metadata"] == {"x402.payment.status": "payment-submitted"}
    huge = {**pay, "parts": [{"kind": "text", "text": "x" * 10_000}]}
    assert loggable(huge)["parts"][0]["text"].startswith("(a message of ")
    for n in range(MAX_LOG + 5):
        note = Note(text=f"step {n}")
        changed = apply(task, Update(TaskState.INPUT_REQUIRED, note), 2.0, logged)
        assert changed is not None
        task = changed
    assert len(task.log) == MAX_LOG
    assert TaskRecord.from_document(task.to_document()) == task


def test_a_task_document_written_before_the_log_still_reads() -> None:
    task = _task(TaskState.WORKING)
    document = task.to_document()
    document["format"] = "x402srv.a2a.task/1"
    del document["log"]
    for key in ("catalog", "txHash"):
        del document["note"][key]
    assert TaskRecord.from_document(document) == task


# ------------------------------------------------------------------ versions and 1.0 JSON


@pytest.mark.parametrize(
    ("header", "method", "version"),
    [
        (None, "message/send", Version.V03),
        (None, "SendMessage", Version.V10),
        ("", "SendMessage", Version.V10),
        ("0.3", "SendMessage", Version.V03),
        ("0.3.0", "message/send", Version.V03),
        ("1.0", "message/send", Version.V10),
        (" 1 ", "GetTask", Version.V10),
    ],
)
def test_the_version_of_a_request(header: str | None, method: str, version: Version) -> None:
    assert version_of(header, method) is version


@pytest.mark.parametrize("header", ["2.0", "abc", "1.0-beta", "0.3.x"])
def test_versions_we_do_not_serve(header: str) -> None:
    with pytest.raises(RpcError) as raised:
        version_of(header, "SendMessage")
    assert raised.value.code == -32009


def test_1_0_messages_read_as_0_3() -> None:
    message = {
        "messageId": "m",
        "role": "ROLE_USER",
        "taskId": "t",
        "parts": [
            {"text": "hi", "metadata": {"a": 1}},
            {"data": {"planId": "hourly"}},
            {"url": "https://x/y.png", "filename": "y.png", "mediaType": "image/png"},
        ],
    }
    assert v1.message_in(message) == {
        "kind": "message",
        "messageId": "m",
        "role": "user",
        "taskId": "t",
        "parts": [
            {"kind": "text", "text": "hi", "metadata": {"a": 1}},
            {"kind": "data", "data": {"planId": "hourly"}},
            {
                "kind": "file",
                "file": {"uri": "https://x/y.png", "name": "y.png", "mimeType": "image/png"},
            },
        ],
    }


def test_0_3_answers_written_as_1_0() -> None:
    status = {
        "state": "input-required",
        "message": {
            "kind": "message",
            "role": "agent",
            "messageId": "s",
            "parts": [{"kind": "text", "text": "pay"}],
        },
        "timestamp": "2026-01-01T00:00:00Z",
    }
    task = {"kind": "task", "id": "t", "contextId": "c", "status": status}
    assert v1.send_result(task) == {
        "task": {
            "id": "t",
            "contextId": "c",
            "status": {
                "state": "TASK_STATE_INPUT_REQUIRED",
                "message": {"role": "ROLE_AGENT", "messageId": "s", "parts": [{"text": "pay"}]},
                "timestamp": "2026-01-01T00:00:00Z",
            },
        }
    }
    event = {
        "kind": "status-update",
        "taskId": "t",
        "contextId": "c",
        "status": status,
        "final": True,
    }
    assert set(v1.event(event)) == {"statusUpdate"}
    assert "final" not in v1.event(event)["statusUpdate"]
