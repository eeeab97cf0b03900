"""What each message does to a task: the A2A side of a purchase, over the pipeline.

    message                                  task
    ---------------------------------------  ------------------------------------------------
    opens a task, names no plan              input-required: the catalog (every plan, payable)
    opens a task, names a plan               the pipeline's answer for that plan (challenge)
    names a plan on a catalog task           the same, on that task
    payment-submitted                        settled by the pipeline; working while it settles,
                                             then completed (or input-required: pay again)
    payment made for another payment request input-required, payment-failed: DUPLICATE_NONCE
      (accepted.extra names another challenge) if it is spent, else INVALID_AMOUNT; no pipeline
                                             call, so nothing moves on-chain
    payment-rejected, tasks/cancel           canceled, while nothing is paid or being settled
    anything else on a task still open       taken (logged), the task unchanged
    anything but a payment on a final task   -32004 (a final task takes no more messages)

Every pipeline call sends the task's own purchase (planId, requestId,
resourceId) as the body, so a task is linked to its challenge by requestId and
the rules of docs/protocol/flow.md for replays, duplicates and idempotency hold exactly as over
HTTP. A payment is settled in a task of its own, which a client that hangs up
cannot cancel: what it pays for always ends on the task. A payment that fails
counts against the client's unpaid-request limit, as over HTTP; past it the
call is answered 429 and the task is left as it was.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from x402srv.a2a.documents import TERMINAL_STATES, Purchase, TaskRecord, TaskState, loggable, new_id
from x402srv.a2a.intent import (
    NoPlan,
    PaymentRejected,
    PaymentSubmitted,
    PlanChosen,
    read_followup,
    read_request,
)
from x402srv.a2a.jsonrpc import INVALID_PARAMS, TASK_NOT_CANCELABLE, UNSUPPORTED_OPERATION, RpcError
from x402srv.a2a.outcomes import (
    Update,
    apply,
    canceled,
    catalog,
    from_problem,
    from_result,
    new_task,
    rpc_error,
    settlement_failed_after_all,
    submitted,
)
from x402srv.a2a.progress import SettlementWatch
from x402srv.a2a.repository import TaskRepository
from x402srv.a2a.wire import Message
from x402srv.access.ids import uuid4_str
from x402srv.access.pipeline import AccessPipeline, payment_key
from x402srv.errors import PaymentFailed, ProblemError, RateLimited, TierNotFound, TxAlreadyRedeemed
from x402srv.interfaces import Clock
from x402srv.server.logs import fingerprint
from x402srv.wire.protocol import AccessBody, PaymentPayload
from x402srv.wire.reasons import Reason

__all__ = ["Conversation", "Reply"]

log = logging.getLogger("x402srv.a2a")


@dataclass(frozen=True, slots=True)
class Reply:
    """The task to show now, and the payment still being settled for it, if any."""

    record: TaskRecord
    settling: asyncio.Task[TaskRecord] | None = None
    #: Set once the settlement's first step is written on the task.
    started: asyncio.Event = field(default_factory=asyncio.Event)

    async def settled(self) -> TaskRecord:
        """The task once its payment is settled (shielded: the settlement always runs on)."""
        if self.settling is None:
            return self.record
        return await asyncio.shield(self.settling)

    async def under_way(self, tasks: TaskRepository) -> TaskRecord:
        """The task as soon as its settlement shows on it (``returnImmediately``).

        Not before: a client that then asks tasks/get must find what it was told.
        """
        if self.settling is None:
            return self.record
        started = asyncio.ensure_future(self.started.wait())
        await asyncio.wait({self.settling, started}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if self.settling.done():
            return self.settling.result()
        record, _ = await tasks.load(self.record.task_id)
        return record


def _offered(record: TaskRecord) -> str | None:
    """The requestId the task's catalog offered (in every requirement's ``extra``)."""
    accepts = (record.required or {}).get("accepts") or [{}]
    request_id = accepts[0].get("extra", {}).get("requestId")
    return request_id if isinstance(request_id, str) else None


def _unchanged(record: TaskRecord) -> Update:
    return Update(state=record.state, note=record.note)


class Conversation:
    def __init__(self, pipeline: AccessPipeline, tasks: TaskRepository, clock: Clock) -> None:
        self._pipeline = pipeline
        self._tasks = tasks
        self._clock = clock
        self._watch = SettlementWatch(pipeline)
        self._plans = list(pipeline.plans)
        self._network = pipeline.network.caip2
        self._networks = {n.caip2 for n in pipeline.config.resolved_networks}
        self._settling: set[asyncio.Task[TaskRecord]] = set()

    # ------------------------------------------------------------ messages

    async def start(self, message: Message) -> Reply:
        """A message without a taskId: a new task, for a plan or showing the catalog."""
        intent = read_request(message, self._plans)
        context_id = message.contextId or new_id()
        user = loggable(message.model_dump(mode="json", exclude_none=True))
        if isinstance(intent, NoPlan):
            update, purchase = catalog(self._pipeline.offers.discovery().body), None
        else:
            purchase = self._purchase(intent.body)
            update = await self._plan_update(purchase)
        record = new_task(new_id(), context_id, purchase, update, self._clock(), user)
        await self._tasks.create(record)
        # DEBUG: anyone can open tasks for free; a line for each could fill the disk.
        log.debug("a2a: task %s opened, %s", fingerprint(record.task_id), record.state)
        return Reply(record)

    async def follow_up(self, message: Message, client: str | None = None) -> Reply:
        """A message on an existing task; a payment that fails counts against ``client``."""
        assert message.taskId is not None
        record, version = await self._tasks.load(message.taskId)
        if message.contextId is not None and message.contextId != record.context_id:
            raise RpcError(INVALID_PARAMS, {"detail": "contextId is not the task's contextId"})
        intent = read_followup(message, self._plans)
        user = loggable(message.model_dump(mode="json", exclude_none=True))
        if isinstance(intent, PaymentRejected):
            return Reply(await self.cancel(record, version, rejected=True))
        if record.state in TERMINAL_STATES and not (
            isinstance(intent, PaymentSubmitted) and record.state is TaskState.COMPLETED
        ):
            # A completed task still answers a payment (the same grant, nothing paid
            # twice); a final task takes nothing else.
            raise RpcError(
                UNSUPPORTED_OPERATION,
                {"detail": f"the task is {record.state.value}; start a new one"},
            )
        if isinstance(intent, PaymentSubmitted):
            return await self._pay(record, version, intent, user, client)
        if isinstance(intent, PlanChosen) and record.purchase is None:
            return Reply(await self._choose(record, version, intent.body, user))
        # Conversation the task has no use for: taken, and the task answers as it is.
        record, _ = await self._tasks.update(record, version, _unchanged(record), user)
        return Reply(record)

    async def _choose(
        self, record: TaskRecord, version: int, body: AccessBody, user: dict[str, Any]
    ) -> TaskRecord:
        """A plan named on a task that showed the catalog: its payment request, there."""
        purchase = self._purchase(body)
        update = await self._plan_update(purchase)
        record, version = await self._tasks.bind(record, version, purchase)
        if record.purchase != purchase:  # another message chose first: that choice stands
            update = _unchanged(record)
        record, _ = await self._tasks.update(record, version, update, user)
        return record

    async def _pay(
        self,
        record: TaskRecord,
        version: int,
        intent: PaymentSubmitted,
        user: dict[str, Any],
        client: str | None,
    ) -> Reply:
        request_id = record.purchase.request_id if record.purchase else _offered(record)
        if intent.made_for_another(record.challenge_id, request_id):
            # A failed payment, counted before anything is written (429 past the limit).
            await self._pipeline.limit_failed(client)
            refused = await self._refuse_foreign(intent.payment)
            record, _ = await self._tasks.update(record, version, refused, user)
            return Reply(record)
        logged: dict[str, Any] | None = user
        if record.purchase is None:
            # Paid straight from the catalog: the plan is the one the payment accepted.
            # Its challenge is made first (that costs nothing), so the payment is then
            # settled exactly like one made for a named plan, and a failed one leaves
            # that plan's payment request on the task to pay again.
            plan_id = intent.plan_id
            if plan_id is None or plan_id not in self._plans:
                raise rpc_error(TierNotFound("the payment's accepted.extra.planId names no plan"))
            # Its requestId is the one the catalog offered (the buyer's echo), as over HTTP.
            purchase = Purchase(request_id or uuid4_str(), plan_id, "default")
            update = await self._plan_update(purchase)
            record, version = await self._tasks.bind(record, version, purchase)
            if record.purchase == purchase:
                record, version = await self._tasks.update(record, version, update, user)
                logged = None
        started = asyncio.Event()
        payment = intent.payment
        settling = asyncio.ensure_future(
            self._settle(record, version, payment, logged, started, client)
        )
        self._settling.add(settling)
        settling.add_done_callback(self._settled)
        view = apply(record, submitted(), self._clock()) or record
        return Reply(view, settling, started)

    async def _refuse_foreign(self, payment: PaymentPayload) -> Update:
        """A payment made for another payment request: spent already, or not this task's."""
        try:
            key = payment_key(payment)
        except PaymentFailed as refused:
            return from_problem(refused, self._receipt_network(payment))
        if await self._pipeline.store.get_by_payment(key) is not None:
            error: ProblemError = TxAlreadyRedeemed(
                "this payment was already used for another purchase"
            )
        else:
            error = PaymentFailed(
                Reason.INVALID_PAYMENT_REQUIREMENTS,
                "this payment was made for another payment request (accepted.extra); "
                "sign this task's x402.payment.required",
            )
        return from_problem(error, self._network)

    def _receipt_network(self, payment: PaymentPayload | None) -> str:
        """A receipt names the network paid on, if this seller takes it; else the first one."""
        if payment is not None and payment.accepted.network in self._networks:
            return payment.accepted.network
        return self._network

    def _settled(self, settling: asyncio.Task[TaskRecord]) -> None:
        self._settling.discard(settling)
        if settling.cancelled() or settling.exception() is None:
            return
        if isinstance(settling.exception(), RateLimited):
            return  # a failed payment past the limit: answered 429, nothing to log per request
        log.info("a2a: a payment ended without a task update: %s", settling.exception())

    async def _settle(
        self,
        record: TaskRecord,
        version: int,
        payment: PaymentPayload,
        user: dict[str, Any] | None,
        started: asyncio.Event,
        client: str | None,
    ) -> TaskRecord:
        """One pipeline call for the payment; each step it reports is written on the task.

        A payment that fails past the client's unpaid-request limit ends in
        ``RateLimited`` (the call's 429) and leaves the task as it was.
        """
        purchase = record.purchase
        assert purchase is not None
        with self._watch.watch(purchase.request_id) as steps:
            call = asyncio.ensure_future(self._ask(purchase, payment, client))
            # If writing a step fails, the pipeline call still ends on its own (and its
            # answer shows on the next tasks/get): its outcome is read, never left dangling.
            call.add_done_callback(lambda done: done.cancelled() or done.exception())
            while not call.done() or not steps.empty():
                if steps.empty():
                    step = asyncio.ensure_future(steps.get())
                    await asyncio.wait({call, step}, return_when=asyncio.FIRST_COMPLETED)
                    if not step.done():
                        step.cancel()
                        continue
                    update = step.result()
                else:
                    update = steps.get_nowait()
                record, version = await self._tasks.update(record, version, update, user)
                user = None
                started.set()
        record, _ = await self._tasks.update(record, version, call.result(), user)
        log.info(
            "a2a: task %s (challenge %s) is %s after a payment",
            fingerprint(record.task_id),
            record.challenge_id,
            record.state,
        )
        return record

    # ------------------------------------------------------------ shared steps

    def _purchase(self, body: AccessBody) -> Purchase:
        return Purchase(body.request_id or uuid4_str(), body.plan_id or "", body.resource_id)

    async def _plan_update(self, purchase: Purchase) -> Update:
        update = await self._ask(purchase, None)
        if update.state is TaskState.FAILED:  # e.g. this requestId's challenge expired
            raise RpcError(INVALID_PARAMS, update.note.problem)
        return update

    async def _ask(
        self, purchase: Purchase, payment: PaymentPayload | None, client: str | None = None
    ) -> Update:
        """One pipeline call for the task's purchase, as a task update (but the 429)."""
        body = AccessBody(purchase.plan_id, purchase.request_id, purchase.resource_id)
        try:
            result = await self._pipeline.access(body, payment, client=client)
        except RateLimited:
            raise  # a failed payment past the limit: the call's answer, not the task's
        except ProblemError as error:
            return from_problem(error, self._receipt_network(payment))
        return from_result(result)

    async def refresh(self, record: TaskRecord, version: int) -> TaskRecord:
        """Ask the pipeline about a task that is not final (the same request, no payment)."""
        if record.purchase is None or record.state in TERMINAL_STATES:
            return record
        update = await self._ask(record.purchase, None)
        if update.state is TaskState.INPUT_REQUIRED:
            if record.state is TaskState.INPUT_REQUIRED:
                return record  # still payable: keep what the task said last
            update = settlement_failed_after_all(update)
        elif update.state is record.state is TaskState.WORKING and update.receipt is None:
            return record  # still being settled: the task already says so
        record, _ = await self._tasks.update(record, version, update)
        return record

    async def cancel(self, record: TaskRecord, version: int, *, rejected: bool) -> TaskRecord:
        """Cancel while nothing is paid or being settled; once final, paid or settling: -32002."""
        if record.state in TERMINAL_STATES:
            raise RpcError(TASK_NOT_CANCELABLE, {"detail": f"the task is {record.state.value}"})
        update = canceled(rejected=rejected)
        if record.purchase is not None:
            answer = await self._ask(record.purchase, None)
            if answer.state is not TaskState.INPUT_REQUIRED:
                update = answer
        record, _ = await self._tasks.update(record, version, update)
        if record.state is not TaskState.CANCELED:
            raise RpcError(TASK_NOT_CANCELABLE, {"detail": f"the task is {record.state.value}"})
        return record
