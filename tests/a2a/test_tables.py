"""The A2A layer's tables and folding rules, checked without a server.

The error-code table must cover every reason our own checks and settlers give
(a new reason would otherwise silently become SETTLEMENT_FAILED), and the task
folding rules are what keep concurrent answers from losing a grant; both are
pure, so they are tested directly here and end to end in the other modules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from x402srv import protocol
from x402srv.a2a.documents import Note, Purchase, TaskRecord, TaskState
from x402srv.a2a.extension import REASON_CODES, ExtensionError, activated_extensions, error_code
from x402srv.a2a.outcomes import Update, apply, canceled, from_problem
from x402srv.errors import ChallengeExpired, PaymentFailed, SettlementPending

REPO = Path(__file__).resolve().parents[2]
NETWORK = "eip155:31337"


def _reasons_in(path: Path) -> set[str]:
    text = path.read_text()
    return set(re.findall(r'REASON_[A-Z_]+ = "([a-z0-9_]+)"', text)) | set(
        re.findall(r'Rejected\(\s*"([a-z0-9_]+)"', text)
    )


def test_every_reason_we_raise_has_a_code() -> None:
    sources = [
        REPO / "x402srv/protocol.py",
        REPO / "x402srv/default_plugins/facilitator.py",
        REPO / "x402srv/transfer_call.py",
    ]
    reasons = set().union(*(_reasons_in(path) for path in sources))
    assert protocol.REASON_SIGNATURE in reasons
    assert reasons <= set(REASON_CODES), sorted(reasons - set(REASON_CODES))


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


def test_completed_is_final() -> None:
    done = apply(_task(TaskState.INPUT_REQUIRED), GRANTED, 2.0)
    assert done is not None and done.state is TaskState.COMPLETED
    late_failure = from_problem(PaymentFailed("transaction_failed"), NETWORK)
    for update in (late_failure, canceled(rejected=True), GRANTED):
        assert apply(done, update, 3.0) is None


def test_a_transfer_wins_over_a_cancel_that_raced_it() -> None:
    """SPEC 5.2 through A2A: a payment the chain shows always ends in a grant on its task."""
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
