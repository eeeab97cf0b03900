"""Pipeline answers -> task updates: the one table from the flow's answers to A2A.

The mapping as a whole: docs/protocol/a2a.md.

The pipeline decides; this module only says how each of its answers looks on a
task. ``Update`` is that look; ``apply`` folds it into the stored task (pure, so
the repository can re-apply it after losing a compare-and-set) and logs the
status it replaces and the user message that caused it.

    pipeline answer                 task state      x402.payment.status  x402.payment.error
    ------------------------------  --------------  -------------------  --------------------
    402 discovery (no plan yet)     input-required  payment-required     (every plan offered)
    402 offer (challenge)           input-required  payment-required
    (settling, observed)            working         payment-verified     (x402srv.txHash)
    200 AccessGrant                 completed       payment-completed    (receipt appended)
    402 PAYMENT_FAILED (reason)     input-required  payment-failed       REASON_CODES[reason]
    409 TX_ALREADY_REDEEMED         input-required  payment-failed       DUPLICATE_NONCE
    409 SETTLEMENT_IN_PROGRESS      working         payment-submitted    (retry hint)
    502 SETTLEMENT_PENDING          working         payment-submitted    (retry hint)
    503 SETTLER_UNAVAILABLE         input-required  payment-failed       SETTLEMENT_FAILED
                                                                         (retry hint: the same
                                                                         payment, later)
    500 paid, credential pending    working         payment-completed    (retry hint, receipt)
    410 CHALLENGE_EXPIRED           failed          payment-failed       EXPIRED_PAYMENT
    410 GRANT_REVOKED (paid, never  failed          payment-completed    (x402srv.problem)
        delivered: owed to you)
    410 GRANT_REFUNDED              failed          payment-completed    (x402srv.problem,
                                                                         x402srv.refundTxHash)
    400 INVALID_REQUEST,            JSON-RPC -32602 Invalid params; the task is unchanged
        TIER_NOT_FOUND,
    409 REQUEST_ID_CONFLICT
    503 STORE_UNAVAILABLE, 500      JSON-RPC -32603 Internal error; task unchanged, nothing settled

``tasks/get`` asks the pipeline again about a task that is not final (the same
request without a payment), so polling a ``working`` task ends in ``completed``
once the chain shows the transfer, or back in ``input-required``
(``SETTLEMENT_FAILED``) once it shows none; a task paid over HTTP with its
requestId shows ``completed`` too. Failed payments leave the task
``input-required`` with the same PaymentRequired, so the client can sign a new
authorization and pay again. ``completed`` is never undone, and it replaces a
``canceled`` or ``failed`` that raced it: a transfer always ends in a grant.

A purchase whose money went back (docs/refunds.md) keeps its task's state
(``completed`` stays completed: A2A never moves a task out of a terminal
state), but ``tasks/get`` shows the status message ``refunded`` says: what was
refunded, the refund's txHash (``x402srv.refundTxHash``) and the 410
GRANT_REFUNDED problem (``x402srv.problem``), computed from the purchase's
refunds each time, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from x402srv.a2a.documents import TERMINAL_STATES, Note, Purchase, TaskRecord, TaskState, new_id
from x402srv.a2a.extension import REDEEMED_REASON, ExtensionError, PaymentStatus, error_code
from x402srv.a2a.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from x402srv.a2a.render import catalog_text, status_of
from x402srv.access.pipeline import AccessResult
from x402srv.errors import (
    ChallengeExpired,
    CredentialPending,
    GrantRefunded,
    GrantRevoked,
    PaymentFailed,
    ProblemError,
    SettlementInProgress,
    SettlementPending,
    SettlerUnavailable,
    TxAlreadyRedeemed,
)
from x402srv.wire.offers import AccessGranted, PaymentOffer
from x402srv.wire.reasons import Reason

__all__ = [
    "Update",
    "apply",
    "canceled",
    "catalog",
    "from_problem",
    "from_result",
    "new_task",
    "problem_data",
    "rpc_error",
    "settlement_failed_after_all",
    "settling",
    "submitted",
]

#: The x402 PaymentRequired members of our 402 body; the rest are our challenge members.
_PAYMENT_REQUIRED_KEYS = ("x402Version", "error", "resource", "accepts")


@dataclass(frozen=True, slots=True)
class Update:
    """How one pipeline answer changes a task."""

    state: TaskState
    note: Note
    challenge_id: str | None = None
    required: dict[str, Any] | None = None
    offer: dict[str, Any] | None = None
    receipt: dict[str, Any] | None = None
    grant: dict[str, Any] | None = None


def problem_data(error: ProblemError) -> dict[str, Any]:
    """The problem document (secret-free by construction) plus its retry hint."""
    data = error.to_problem()
    if error.retry_after is not None:
        data["retryAfter"] = max(1, int(error.retry_after))
    return data


def rpc_error(error: ProblemError) -> RpcError:
    """A pipeline refusal that leaves the task as it was: bad input, or nothing settled."""
    code = INVALID_PARAMS if 400 <= error.status < 500 else INTERNAL_ERROR
    return RpcError(code, problem_data(error))


def catalog(discovery: dict[str, Any]) -> Update:
    """A task that waits for a plan: every plan, payable as it is (discovery-first)."""
    return Update(
        state=TaskState.INPUT_REQUIRED,
        note=Note(
            text=catalog_text(discovery),
            payment_status=PaymentStatus.REQUIRED,
            catalog=True,
        ),
        required={key: discovery[key] for key in _PAYMENT_REQUIRED_KEYS if key in discovery},
        offer=discovery,
    )


def submitted() -> Update:
    """What a payment's own stream first says: received, being checked (never stored)."""
    return Update(
        state=TaskState.WORKING,
        note=Note(
            text="Payment received; checking it against the payment request.",
            payment_status=PaymentStatus.SUBMITTED,
        ),
    )


def settling(tx_hash: str | None, *, mined: bool = False) -> Update:
    """The pipeline claimed the payment and is settling it (docs/protocol/flow.md, steps 7-9).

    ``mined``: the chain confirmed ``tx_hash`` already (the move to PAID).
    """
    if tx_hash is None:
        text = "Payment verified; settling it on-chain."
    elif mined:
        text = f"Payment verified; transaction {tx_hash} mined, issuing the access credential."
    else:
        text = f"Payment verified; transaction {tx_hash} broadcast, waiting for it to be mined."
    return Update(
        state=TaskState.WORKING,
        note=Note(text=text, payment_status=PaymentStatus.VERIFIED, tx_hash=tx_hash),
    )


def from_result(result: AccessResult) -> Update:
    if isinstance(result, PaymentOffer):
        body = result.body
        plan = body.get("planId", "")
        return Update(
            state=TaskState.INPUT_REQUIRED,
            note=Note(
                text=(
                    f"Payment is required for plan {plan}: sign one of "
                    "x402.payment.required.accepts (x402 exact, EIP-3009) and send it on "
                    "this task with x402.payment.status 'payment-submitted'."
                ),
                payment_status=PaymentStatus.REQUIRED,
            ),
            challenge_id=body.get("challengeId"),
            required={key: body[key] for key in _PAYMENT_REQUIRED_KEYS if key in body},
            offer=body,
        )
    assert isinstance(result, AccessGranted)
    grant = result.grant
    return Update(
        state=TaskState.COMPLETED,
        note=Note(
            text=(
                f"Payment settled in {grant['txHash']}. The AccessGrant is in the artifact: "
                "send its accessToken as Authorization: Bearer to the seller's API."
            ),
            payment_status=PaymentStatus.COMPLETED,
        ),
        challenge_id=grant.get("challengeId"),
        receipt=result.receipt,
        grant=grant,
    )


def _failed_receipt(reason: str, network: str) -> dict[str, Any]:
    return {"success": False, "errorReason": reason, "transaction": "", "network": network}


def _sentence(error: ProblemError) -> str:
    detail = error.detail.rstrip(". ")
    return f"{detail[:1].upper()}{detail[1:]}."


def _retry_note(error: ProblemError, status: PaymentStatus) -> Note:
    """A ``working`` task: the answer comes later, from the same request asked again."""
    wait = max(1, int(error.retry_after or 1))
    return Note(
        text=f"{_sentence(error)} Ask again with tasks/get (or send the same payment again) "
        f"in {wait} s.",
        payment_status=status,
        retry_after=wait,
        problem=problem_data(error),
    )


def from_problem(error: ProblemError, network: str) -> Update:
    """The table's failure rows; refusals that change no task are raised as ``RpcError``."""
    if isinstance(error, PaymentFailed | TxAlreadyRedeemed):
        # A redeemed payment fails like any other: its reason is the spent nonce.
        reason = error.reason if isinstance(error, PaymentFailed) else REDEEMED_REASON
        return Update(
            state=TaskState.INPUT_REQUIRED,
            note=Note(
                text=f"Payment failed: {_sentence(error)} Sign a new authorization and pay again.",
                payment_status=PaymentStatus.FAILED,
                error=error_code(reason),
                problem=problem_data(error),
            ),
            receipt=_failed_receipt(reason, network),
        )
    if isinstance(error, SettlementInProgress | SettlementPending):
        return Update(state=TaskState.WORKING, note=_retry_note(error, PaymentStatus.SUBMITTED))
    if isinstance(error, SettlerUnavailable):
        # Nothing moved and the payment is still good: the task waits for it again
        # (input-required, the same PaymentRequired), and says when to send it.
        wait = max(1, int(error.retry_after or 1))
        return Update(
            state=TaskState.INPUT_REQUIRED,
            note=Note(
                text=f"Payment not settled: {_sentence(error)} Send the same payment on this "
                f"task again in {wait} s.",
                payment_status=PaymentStatus.FAILED,
                error=ExtensionError.SETTLEMENT_FAILED,
                retry_after=wait,
                problem=problem_data(error),
            ),
            receipt=_failed_receipt(Reason.UNEXPECTED_SETTLE_ERROR, network),
        )
    if isinstance(error, CredentialPending):
        tx_hash = str(error.extra.get("txHash", ""))
        return Update(
            state=TaskState.WORKING,
            note=_retry_note(error, PaymentStatus.COMPLETED),
            receipt={"success": True, "transaction": tx_hash, "network": network},
        )
    if isinstance(error, GrantRevoked) and not isinstance(error, GrantRefunded):
        # Paid, and never delivered (owed back): no grant will come for this task.
        return Update(
            state=TaskState.FAILED,
            note=Note(
                text=f"{_sentence(error)} It will not be delivered.",
                payment_status=PaymentStatus.COMPLETED,
                problem=problem_data(error),
            ),
        )
    if isinstance(error, GrantRefunded):
        return Update(state=TaskState.FAILED, note=refunded(error))
    if isinstance(error, ChallengeExpired):
        return Update(
            state=TaskState.FAILED,
            note=Note(
                text=f"{_sentence(error)} It can no longer be paid. Start a new task to buy.",
                payment_status=PaymentStatus.FAILED,
                error=ExtensionError.EXPIRED_PAYMENT,
                problem=problem_data(error),
            ),
        )
    raise rpc_error(error)


def refunded(error: GrantRefunded) -> Note:
    """The status message of a task whose purchase was refunded (docs/refunds.md)."""
    tx_hash = str(error.extra.get("txHash") or "")
    return Note(
        text=f"{_sentence(error)} Refund transaction: {tx_hash}.",
        payment_status=PaymentStatus.COMPLETED,
        problem=problem_data(error),
        refund_tx_hash=tx_hash or None,
    )


def settlement_failed_after_all(offer: Update) -> Update:
    """A ``working`` task whose challenge is payable again: the chain shows no transfer."""
    return replace(
        offer,
        note=Note(
            text=(
                "Payment failed: the settlement did not go through (nothing was transferred). "
                "Sign a new authorization and pay again."
            ),
            payment_status=PaymentStatus.FAILED,
            error=ExtensionError.SETTLEMENT_FAILED,
        ),
    )


def canceled(*, rejected: bool) -> Update:
    if rejected:
        note = Note(
            text="The payment was rejected by the client; the task is canceled.",
            payment_status=PaymentStatus.REJECTED,
        )
    else:
        note = Note(text="The task was canceled by the client.")
    return Update(state=TaskState.CANCELED, note=note)


def apply(
    current: TaskRecord, update: Update, now: float, user: dict[str, Any] | None = None
) -> TaskRecord | None:
    """The task after ``update`` (and the user message that led to it), or None.

    None means nothing is to be written. A completed task never changes (its
    grant is final). Other terminal states only give way to ``completed``: a
    transfer the chain shows always ends in a grant on the task, even if the
    client canceled while it was being settled. A new status pushes the one it
    replaces into the log, after which comes the user's message.
    """
    if current.state is TaskState.COMPLETED:
        return None
    if current.state in TERMINAL_STATES and update.state is not TaskState.COMPLETED:
        return None
    changed = replace(
        current,
        state=update.state,
        note=update.note,
        challenge_id=update.challenge_id or current.challenge_id,
        required=update.required or current.required,
        offer=update.offer or current.offer,
        receipts=current.with_receipt(update.receipt),
        grant=update.grant or current.grant,
    )
    status_changed = not changed.same_as(current)
    if not status_changed and user is None:
        return None
    entries = [{"status": status_of(current)}] if status_changed else []
    if user is not None:
        entries.append({"user": user})
    changed = replace(changed, log=current.logged(*entries))
    if not status_changed:
        return changed
    return replace(changed, message_id=new_id(), updated_at=now)


def new_task(
    task_id: str,
    context_id: str,
    purchase: Purchase | None,
    update: Update,
    now: float,
    user: dict[str, Any],
) -> TaskRecord:
    """A task as its first answer leaves it; the message that opened it starts the log."""
    return TaskRecord(
        task_id=task_id,
        context_id=context_id,
        purchase=purchase,
        log=({"user": user},),
        state=update.state,
        note=update.note,
        updated_at=now,
        challenge_id=update.challenge_id,
        required=update.required,
        offer=update.offer,
        receipts=(update.receipt,) if update.receipt else (),
        grant=update.grant,
    )
