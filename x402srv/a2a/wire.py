"""The A2A params x402srv reads: 0.3's MessageSendParams, TaskQueryParams, TaskIdParams,
and 1.0's ListTasksRequest (1.0 requests are translated to 0.3 first, see ``v1``).

Only the fields the service looks at are typed; everything else A2A allows
(extensions, referenceTaskIds, part metadata ...) passes through unread. The
models are our own rather than ``a2a-sdk``'s so the server does not depend on
that SDK at run time; the tests check them against it. A params object that does
not validate is -32602 with the first problem named (never the offending value).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)

from x402srv.a2a.jsonrpc import INVALID_PARAMS, RpcError
from x402srv.config.problems import problems

__all__ = [
    "DataPart",
    "FilePart",
    "ListTasksParams",
    "Message",
    "MessageSendParams",
    "TaskIdParams",
    "TaskQueryParams",
    "TextPart",
    "parse_params",
]

#: Ids we accept from clients; longer ones cannot name anything we stored.
Identifier = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="allow")


class TextPart(_Wire):
    kind: Literal["text"]
    text: str
    metadata: dict[str, Any] | None = None


class DataPart(_Wire):
    kind: Literal["data"]
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


class FilePart(_Wire):
    kind: Literal["file"]
    file: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part = Annotated[TextPart | DataPart | FilePart, Field(discriminator="kind")]


class Message(_Wire):
    kind: Literal["message"] = "message"
    messageId: Identifier
    role: Literal["user", "agent"]
    parts: list[Part] = Field(max_length=64)
    taskId: Identifier | None = None
    contextId: Identifier | None = None
    metadata: dict[str, Any] | None = None


class SendConfiguration(_Wire):
    acceptedOutputModes: list[str] | None = None
    blocking: bool | None = None
    #: 1.0's name for ``blocking: false``.
    returnImmediately: bool | None = None
    historyLength: int | None = Field(default=None, ge=0)
    pushNotificationConfig: dict[str, Any] | None = None

    @property
    def immediately(self) -> bool:
        return self.returnImmediately is True or self.blocking is False


class MessageSendParams(_Wire):
    message: Message
    configuration: SendConfiguration | None = None
    metadata: dict[str, Any] | None = None


class TaskQueryParams(_Wire):
    id: str
    historyLength: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] | None = None


class TaskIdParams(_Wire):
    id: str
    metadata: dict[str, Any] | None = None


#: TaskState names of 1.0 (ProtoJSON), for the ListTasks status filter.
TaskStateName = Literal[
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
]


class ListTasksParams(_Wire):
    """1.0 ``ListTasksRequest``; a page token can only be one this agent issued (none yet)."""

    tenant: str | None = None
    contextId: Identifier | None = None
    status: TaskStateName | None = None
    pageSize: int | None = Field(default=None, ge=1, le=100)
    pageToken: Literal[""] | None = None
    historyLength: int | None = Field(default=None, ge=0)
    statusTimestampAfter: str | None = None
    includeArtifacts: bool | None = None

    @field_validator("statusTimestampAfter")
    @classmethod
    def _timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            datetime.fromisoformat(value)  # ValueError: not an RFC 3339 timestamp
        return value


Params = TypeVar("Params", bound=BaseModel)


def parse_params(model: type[Params], params: dict[str, Any]) -> Params:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        path, message = problems(exc)[0]
        raise RpcError(INVALID_PARAMS, {"detail": f"params.{path}: {message}"}) from None
