"""A2A 0.3.0 JSON-RPC methods on top of the access pipeline (the x402 extension, Standalone).

    method                               answer
    -----------------------------------  ------------------------------------------------------
    message/send, no taskId, no plan     a Message with the catalog (skill discover-products)
    message/send, no taskId, a plan      a new Task: input-required, payment-required
    message/send on a task,              the pipeline settles the payment; the Task as it is
      payment-submitted                  now (completed, or input-required + payment-failed)
    message/send on a task,              the Task, canceled
      payment-rejected
    tasks/get                            the Task (one that is not final is asked again first)
    tasks/cancel                         the Task, canceled; -32002 once final, paid or settling
    message/stream, tasks/resubscribe,   -32004 (capabilities.streaming and .pushNotifications
    tasks/pushNotificationConfig/*       are false)
    agent/getAuthenticatedExtendedCard   -32007
    anything else                        -32601

Every pipeline call sends the task's own purchase (planId, requestId,
resourceId) as the body, so a task is linked to its challenge by requestId and
the SPEC 4.2 rules for replays, duplicates and idempotency hold exactly as over
HTTP. ``outcomes`` maps each pipeline answer to the task; no settlement logic
lives here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ..config import Config
from ..errors import ProblemError
from ..ids import uuid4_str
from ..interfaces import Clock, Store
from ..pipeline import AccessPipeline
from ..protocol import AccessBody, PaymentPayload
from .documents import (
    TERMINAL_STATES,
    Purchase,
    TaskRecord,
    TaskState,
    catalog_message,
    new_id,
    render_task,
)
from .intent import (
    Catalog,
    PaymentRejected,
    PaymentSubmitted,
    read_followup,
    read_request,
)
from .jsonrpc import (
    CONTENT_TYPE_NOT_SUPPORTED,
    EXTENDED_CARD_NOT_CONFIGURED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    TASK_NOT_CANCELABLE,
    UNSUPPORTED_OPERATION,
    RpcCall,
    RpcError,
    error_response,
    parse_body,
    read_call,
    result_response,
)
from .outcomes import (
    Update,
    canceled,
    from_problem,
    from_result,
    new_task,
    rpc_error,
    settlement_failed_after_all,
)
from .repository import TaskRepository
from .wire import (
    FilePart,
    Message,
    MessageSendParams,
    TaskIdParams,
    TaskQueryParams,
    parse_params,
)

__all__ = ["A2AService"]

log = logging.getLogger("x402srv.a2a")

#: Methods A2A 0.3.0 defines that this agent does not offer, and the capability they need.
UNSUPPORTED: Final = {
    "message/stream": "streaming",
    "tasks/resubscribe": "streaming",
    "tasks/pushNotificationConfig/set": "pushNotifications",
    "tasks/pushNotificationConfig/get": "pushNotifications",
    "tasks/pushNotificationConfig/list": "pushNotifications",
    "tasks/pushNotificationConfig/delete": "pushNotifications",
}
#: Output modes under which a client can read our answers (text and JSON data parts).
READABLE_MODES: Final = frozenset({"application/json", "*/*", "application/*"})


class A2AService:
    def __init__(
        self, config: Config, pipeline: AccessPipeline, store: Store, clock: Clock
    ) -> None:
        self._pipeline = pipeline
        self._tasks = TaskRepository(store, clock)
        self._clock = clock
        self._plans = list(config.plan_map)
        self._network = config.network_info.caip2
        self._methods: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            "message/send": self._message_send,
            "tasks/get": self._tasks_get,
            "tasks/cancel": self._tasks_cancel,
        }

    # ------------------------------------------------------------ envelope

    async def handle_bytes(self, raw: bytes) -> dict[str, Any]:
        """A JSON-RPC response document for a raw body; never raises."""
        try:
            document = parse_body(raw)
        except RpcError as error:
            return error_response(error)
        return await self.handle_document(document)

    async def handle_document(self, document: Any) -> dict[str, Any]:
        """A JSON-RPC response document for an already-parsed body; never raises."""
        request_id: str | int | None = None
        try:
            call = read_call(document)
            request_id = call.request_id
            return result_response(request_id, await self._dispatch(call))
        except RpcError as error:
            return error_response(error, request_id)
        except ProblemError as error:  # the store, outside any pipeline call
            return error_response(rpc_error(error), request_id)
        except Exception:
            log.exception("a2a: unexpected error")
            return error_response(RpcError(INTERNAL_ERROR), request_id)

    async def _dispatch(self, call: RpcCall) -> dict[str, Any]:
        method = self._methods.get(call.method)
        if method is not None:
            return await method(call.params)
        if call.method in UNSUPPORTED:
            capability = UNSUPPORTED[call.method]
            raise RpcError(
                UNSUPPORTED_OPERATION,
                {"detail": f"{call.method} is not offered: capabilities.{capability} is false"},
            )
        if call.method == "agent/getAuthenticatedExtendedCard":
            raise RpcError(
                EXTENDED_CARD_NOT_CONFIGURED, {"detail": "the public agent card is all there is"}
            )
        raise RpcError(METHOD_NOT_FOUND, {"detail": f"no method {call.method[:100]!r}"})

    # ------------------------------------------------------------ methods

    async def _message_send(self, params: dict[str, Any]) -> dict[str, Any]:
        send = parse_params(MessageSendParams, params)
        self._check_send(send)
        message = send.message
        if message.taskId is None:
            return await self._start(message)
        return await self._continue(message)

    async def _tasks_get(self, params: dict[str, Any]) -> dict[str, Any]:
        query = parse_params(TaskQueryParams, params)
        record, version = await self._tasks.load(query.id)
        if record.state not in TERMINAL_STATES:
            try:
                record = await self._refresh(record, version)
            except (RpcError, ProblemError) as error:
                # Reading a task never fails because asking again did: the stored task
                # is still true as of its last answer.
                log.warning("a2a: task %s could not be asked again: %s", record.task_id, error)
        return render_task(record)

    async def _tasks_cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        target = parse_params(TaskIdParams, params)
        record, version = await self._tasks.load(target.id)
        return render_task(await self._cancel(record, version, rejected=False))

    # ------------------------------------------------------------ message/send

    @staticmethod
    def _check_send(send: MessageSendParams) -> None:
        if any(isinstance(part, FilePart) for part in send.message.parts):
            raise RpcError(
                CONTENT_TYPE_NOT_SUPPORTED, {"detail": "this agent reads text and data parts only"}
            )
        configuration = send.configuration
        if configuration is None:
            return
        modes = configuration.acceptedOutputModes
        if modes and not READABLE_MODES.intersection(mode.lower() for mode in modes):
            raise RpcError(
                CONTENT_TYPE_NOT_SUPPORTED,
                {"detail": "this agent answers in application/json (data parts) and text"},
            )
        if configuration.pushNotificationConfig is not None:
            raise RpcError(
                UNSUPPORTED_OPERATION,
                {
                    "detail": "push notifications are not offered: capabilities.pushNotifications "
                    "is false"
                },
            )

    async def _start(self, message: Message) -> dict[str, Any]:
        intent = read_request(message, self._plans)
        context_id = message.contextId or new_id()
        if isinstance(intent, Catalog):
            return catalog_message(self._pipeline.offers.discovery.body, context_id)
        body = intent.body
        purchase = Purchase(
            request_id=body.request_id or uuid4_str(),
            plan_id=body.plan_id or "",
            resource_id=body.resource_id,
        )
        update = await self._ask(purchase, None)
        if update.state is TaskState.FAILED:  # e.g. this requestId's challenge expired
            raise RpcError(INVALID_PARAMS, update.note.problem)
        record = new_task(new_id(), context_id, purchase, update, self._clock())
        await self._tasks.create(record)
        log.info("a2a: task %s for plan %s is %s", record.task_id, purchase.plan_id, record.state)
        return render_task(record)

    async def _continue(self, message: Message) -> dict[str, Any]:
        assert message.taskId is not None
        record, version = await self._tasks.load(message.taskId)
        if message.contextId is not None and message.contextId != record.context_id:
            raise RpcError(INVALID_PARAMS, {"detail": "contextId is not the task's contextId"})
        intent = read_followup(message)
        if isinstance(intent, PaymentRejected):
            return render_task(await self._cancel(record, version, rejected=True))
        if not isinstance(intent, PaymentSubmitted):
            raise RpcError(
                INVALID_PARAMS,
                {
                    "detail": f"the task is {record.state.value}; it takes a message with "
                    "x402.payment.status 'payment-submitted' or 'payment-rejected'"
                },
            )
        if record.state in (TaskState.CANCELED, TaskState.FAILED):
            raise RpcError(
                INVALID_PARAMS, {"detail": f"the task is {record.state.value}; start a new one"}
            )
        # A completed task goes through the pipeline too: it answers with the stored
        # grant and nothing is paid twice (SPEC 4.2 step 4), as over HTTP.
        update = await self._ask(record.purchase, intent.payment)
        record = await self._tasks.update(record, version, update)
        log.info("a2a: task %s is %s after a payment", record.task_id, record.state)
        return render_task(record)

    # ------------------------------------------------------------ shared steps

    async def _ask(self, purchase: Purchase, payment: PaymentPayload | None) -> Update:
        """One pipeline call for the task's purchase, as a task update."""
        body = AccessBody(purchase.plan_id, purchase.request_id, purchase.resource_id)
        try:
            result = await self._pipeline.access(body, payment)
        except ProblemError as error:
            return from_problem(error, self._network)
        return from_result(result)

    async def _refresh(self, record: TaskRecord, version: int) -> TaskRecord:
        """Ask the pipeline about a task that is not final (the same request, no payment)."""
        update = await self._ask(record.purchase, None)
        if update.state is TaskState.INPUT_REQUIRED:
            if record.state is TaskState.INPUT_REQUIRED:
                return record  # still payable: keep what the task said last
            update = settlement_failed_after_all(update)
        return await self._tasks.update(record, version, update)

    async def _cancel(self, record: TaskRecord, version: int, *, rejected: bool) -> TaskRecord:
        """Cancel while the challenge is payable; once final, paid or being settled: -32002."""
        if record.state in TERMINAL_STATES:
            raise RpcError(TASK_NOT_CANCELABLE, {"detail": f"the task is {record.state.value}"})
        update = await self._ask(record.purchase, None)
        if update.state is TaskState.INPUT_REQUIRED:
            update = canceled(rejected=rejected)
        record = await self._tasks.update(record, version, update)
        if record.state is not TaskState.CANCELED:
            raise RpcError(TASK_NOT_CANCELABLE, {"detail": f"the task is {record.state.value}"})
        return record
