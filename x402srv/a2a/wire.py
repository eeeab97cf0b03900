"""The A2A 0.3.0 params x402srv reads: MessageSendParams, TaskQueryParams, TaskIdParams.

Only the fields the service looks at are typed; everything else A2A allows
(extensions, referenceTaskIds, part metadata ...) passes through unread. The
models are our own rather than ``a2a-sdk``'s so the server does not depend on
that SDK at run time; the tests check them against it. A params object that does
not validate is -32602 with the first problem named (never the offending value).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from .jsonrpc import INVALID_PARAMS, RpcError

__all__ = [
    "DataPart",
    "FilePart",
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
    historyLength: int | None = Field(default=None, ge=0)
    pushNotificationConfig: dict[str, Any] | None = None


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


Params = TypeVar("Params", bound=BaseModel)


def parse_params(model: type[Params], params: dict[str, Any]) -> Params:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "params"
        raise RpcError(INVALID_PARAMS, {"detail": f"params.{where}: {first['msg']}"}) from None
