"""A2A JSON-RPC, 0.3 and 1.0, with the x402 extension (Standalone flow): the methods.

    operation (0.3 / 1.0 name)           answer
    -----------------------------------  -----------------------------------------------------
    send (message/send, SendMessage)     the Task after the message (see ``conversation``);
                                         a payment is answered once it is settled, or once
                                         it is being settled (returnImmediately,
                                         blocking: false)
    stream (message/stream,              the same as SSE: the Task, then each status it goes
      SendStreamingMessage)              through and its AccessGrant, until final or
                                         input-required (see ``streams``)
    get (tasks/get, GetTask)             the Task (one that is not final is asked again first)
    cancel (tasks/cancel, CancelTask)    the Task, canceled; -32002 once final, paid or settling
    subscribe (tasks/resubscribe,        the stream of a task that is not final; -32004 for one
      SubscribeToTask)                   that is
    list (ListTasks, 1.0 only)           the caller's tasks: none (see ``_list``)
    push notification configs            -32003 (capabilities.pushNotifications is false)
    extended card                        0.3: -32007; 1.0: -32004 (extendedAgentCard is false)
    anything else                        -32601

The version is chosen per request (``versions``); 1.0 params and answers are
translated to and from 0.3 at the edge (``v1``), so both versions run the same
code. A request is read to the end (method, then params) before a missing id
is refused (``jsonrpc``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Final

import x402srv.a2a.v1 as v1
from x402srv.a2a.conversation import Conversation, Reply
from x402srv.a2a.documents import TERMINAL_STATES
from x402srv.a2a.intent import is_payment_submission
from x402srv.a2a.jsonrpc import (
    CONTENT_TYPE_NOT_SUPPORTED,
    EXTENDED_CARD_NOT_CONFIGURED,
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    PUSH_NOT_SUPPORTED,
    UNSUPPORTED_OPERATION,
    RequestId,
    RpcError,
    error_response,
    missing_id,
    parse_body,
    read_call,
    result_response,
)
from x402srv.a2a.outcomes import refunded, rpc_error
from x402srv.a2a.render import render_task
from x402srv.a2a.repository import TaskRepository
from x402srv.a2a.streams import TaskStreams
from x402srv.a2a.versions import Op, Version, errors_in_v1, operation, version_of
from x402srv.a2a.wire import (
    FilePart,
    ListTasksParams,
    MessageSendParams,
    TaskIdParams,
    TaskQueryParams,
    parse_params,
)
from x402srv.access.pipeline import AccessPipeline
from x402srv.config.models import Config
from x402srv.errors import ProblemError, RateLimited
from x402srv.interfaces import Clock, Store
from x402srv.refunds.answers import refunded_answer
from x402srv.server.logs import fingerprint

__all__ = ["A2AService", "Stream"]

log = logging.getLogger("x402srv.a2a")

#: Output modes under which a client can read our answers (text and JSON data parts).
READABLE_MODES: Final = frozenset({"application/json", "*/*", "application/*"})

Result = dict[str, Any]
Events = AsyncGenerator[dict[str, Any], None]


@dataclass(frozen=True, slots=True)
class Stream:
    """An SSE answer: JSON-RPC response documents, one per event (an error ends it)."""

    documents: AsyncGenerator[dict[str, Any], None]


Answer = dict[str, Any] | Stream


class A2AService:
    def __init__(
        self, config: Config, pipeline: AccessPipeline, store: Store, clock: Clock
    ) -> None:
        self._pipeline = pipeline
        keep = config.reconciler
        self._tasks = TaskRepository(
            store,
            clock,
            keep_unpaid=keep.unpaid_retention_hours * 3600,
            keep_paid=keep.retention_days * 86_400,
        )
        self._conversation = Conversation(pipeline, self._tasks, clock)
        self._streams = TaskStreams(self._tasks, self._conversation)

    # ------------------------------------------------------------ envelope

    async def handle_bytes(
        self, raw: bytes, version: str | None = None, *, client: str | None = None
    ) -> Answer:
        """The answer to a raw body; never raises."""
        try:
            document = parse_body(raw)
        except RpcError as error:
            return error_response(error, v10=errors_in_v1(version, None))
        return await self.handle_document(document, version, client=client)

    async def handle_document(
        self, document: Any, version_header: str | None = None, *, client: str | None = None
    ) -> Answer:
        """The answer to an already-parsed body; raises nothing but ``RateLimited``.

        A call that is not a payment submission (``is_payment_submission``)
        counts against ``client``'s unpaid-request limit; past it, ``RateLimited``
        leaves here for the HTTP layer to answer 429 with Retry-After (a refusal
        of the transport, which every HTTP client understands, not a fault of the
        call). A payment submission counts only if it fails: refused here, or
        refused by the pipeline (``Conversation``), past the limit with the 429.
        """
        request_id: RequestId = None
        streaming = False
        method = document.get("method") if isinstance(document, dict) else None
        v10 = errors_in_v1(version_header, method)
        try:
            call = read_call(document)
            request_id = call.request_id
            version = version_of(version_header, call.method)
            op = operation(version, call.method)
            if op is None:
                raise RpcError(METHOD_NOT_FOUND, {"detail": f"no method {call.method[:100]!r}"})
            streaming = op in (Op.STREAM, Op.SUBSCRIBE)
            run = self._bind(op, version, call.params, client)
            if not call.has_id:
                raise missing_id()
            pays = is_payment_submission(call.params.get("message"))
            if not pays:
                await self._pipeline.limit_unpaid(client)
            try:
                result = await run()
            except (RpcError, ProblemError) as refused:
                if pays and _refusal(refused):
                    await self._pipeline.limit_failed(client)  # 429 past the limit
                raise
        except RateLimited:
            raise
        except Exception as error:  # every other failure is answered in JSON-RPC
            answer = error_response(_as_rpc_error(error), request_id, v10=v10)
            # A streaming method answers in SSE even when it fails at once (the A2A
            # TCK expects the stream; the a2a-sdk client reads either).
            return Stream(_one(answer)) if streaming else answer
        if isinstance(result, dict):
            return result_response(request_id, result)
        return Stream(self._documents(request_id, result, v10))

    async def _documents(self, request_id: RequestId, events: Events, v10: bool) -> Events:
        try:
            async for event in events:
                yield result_response(request_id, event)
        except Exception as error:  # the last event says what went wrong
            yield error_response(_as_rpc_error(error), request_id, v10=v10)
        finally:
            await events.aclose()

    def _bind(
        self, op: Op, version: Version, params: dict[str, Any], client: str | None
    ) -> Callable[[], Awaitable[Result | Events]]:
        """Check the params of ``op`` (-32602 ...) and return the call that runs it."""
        v10 = version is Version.V10
        if op in (Op.SEND, Op.STREAM):
            send = parse_params(MessageSendParams, v1.send_params(params) if v10 else params)
            _check_send(send)
            if op is Op.SEND:
                return lambda: self._send(send, v10, client)
            return lambda: self._stream(send, v10, client)
        if op is Op.GET:
            query = parse_params(TaskQueryParams, params)
            return lambda: self._get(query, v10)
        if op in (Op.CANCEL, Op.SUBSCRIBE):
            target = parse_params(TaskIdParams, params)
            if op is Op.CANCEL:
                return lambda: self._cancel(target, v10)
            return lambda: self._subscribe(target, v10)
        if op is Op.LIST:
            listing = parse_params(ListTasksParams, params)
            return lambda: self._list(listing)
        if op is Op.PUSH:
            raise RpcError(
                PUSH_NOT_SUPPORTED, {"detail": "capabilities.pushNotifications is false"}
            )
        if v10:
            raise RpcError(
                UNSUPPORTED_OPERATION, {"detail": "capabilities.extendedAgentCard is false"}
            )
        raise RpcError(
            EXTENDED_CARD_NOT_CONFIGURED, {"detail": "the public agent card is all there is"}
        )

    # ------------------------------------------------------------ methods

    async def _reply(self, send: MessageSendParams, client: str | None) -> Reply:
        if send.message.taskId is None:
            return await self._conversation.start(send.message)
        return await self._conversation.follow_up(send.message, client)

    async def _send(self, send: MessageSendParams, v10: bool, client: str | None) -> Result:
        reply = await self._reply(send, client)
        if send.configuration is not None and send.configuration.immediately:
            record = await reply.under_way(self._tasks)
        else:
            record = await reply.settled()
        task = render_task(record, _history_length(send))
        return v1.send_result(task) if v10 else task

    async def _stream(self, send: MessageSendParams, v10: bool, client: str | None) -> Events:
        reply = await self._reply(send, client)
        events = self._streams.events(reply.record, reply.settling, _history_length(send))
        return _translated(events) if v10 else events

    async def _get(self, query: TaskQueryParams, v10: bool) -> Result:
        record, version = await self._tasks.load(query.id)
        if record.state not in TERMINAL_STATES:
            try:
                record = await self._conversation.refresh(record, version)
            except (RpcError, ProblemError) as error:
                # Reading a task never fails because asking again did: the stored task
                # is still true as of its last answer.
                log.warning(
                    "a2a: task %s could not be asked again: %s", fingerprint(record.task_id), error
                )
        if record.challenge_id is not None:
            # A purchase whose money went back says so on every read (never stored: a
            # completed task does not change; its status message does, docs/refunds.md).
            told = await refunded_answer(self._pipeline.store, record.challenge_id)
            if told is not None:
                record = replace(record, note=refunded(told))
        task = render_task(record, query.historyLength)
        return v1.task(task) if v10 else task

    async def _cancel(self, target: TaskIdParams, v10: bool) -> Result:
        record, version = await self._tasks.load(target.id)
        record = await self._conversation.cancel(record, version, rejected=False)
        task = render_task(record)
        return v1.task(task) if v10 else task

    async def _subscribe(self, target: TaskIdParams, v10: bool) -> Events:
        record, _ = await self._tasks.load(target.id)
        if record.state in TERMINAL_STATES:
            raise RpcError(
                UNSUPPORTED_OPERATION,
                {"detail": f"the task is {record.state.value}; tasks/get shows it"},
            )
        if not v10:
            return self._streams.events(record)
        # 1.0 (docs/protocol/a2a.md): the stream follows the task through input-required
        # and closes with the event that carries its terminal state.
        return _translated(self._streams.events(record, ends=TERMINAL_STATES))

    async def _list(self, listing: ListTasksParams) -> Result:
        """No caller is authenticated here, so no caller may list any task (A2A 1.0 13.1).

        A task is reached by its id alone (122 random bits), and it holds the
        buyer's requestId and, once paid, a bearer token: listing tasks to
        anyone who asks would hand them out. The params are still checked.
        """
        return {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}


def _refusal(error: RpcError | ProblemError) -> bool:
    """The caller's fault (bad params, no such task, a final task), not ours or the store's."""
    if isinstance(error, RpcError):
        return error.code != INTERNAL_ERROR
    return 400 <= error.status < 500 and not isinstance(error, RateLimited)


async def _one(document: dict[str, Any]) -> Events:
    yield document


async def _translated(events: Events) -> Events:
    try:
        async for event in events:
            yield v1.event(event)
    finally:
        await events.aclose()


def _history_length(send: MessageSendParams) -> int | None:
    return send.configuration.historyLength if send.configuration else None


def _as_rpc_error(error: Exception) -> RpcError:
    if isinstance(error, RpcError):
        return error
    if isinstance(error, ProblemError):  # the store, outside any pipeline call
        return rpc_error(error)
    log.exception("a2a: unexpected error")
    return RpcError(INTERNAL_ERROR)


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
        raise RpcError(PUSH_NOT_SUPPORTED, {"detail": "capabilities.pushNotifications is false"})
