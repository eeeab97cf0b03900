"""A2A 0.3 and 1.0 on one endpoint: which version a request speaks, and its method names.

The ``A2A-Version`` header decides, as the ``a2a-sdk`` does: ``0.x`` is 0.3 and
``1.x`` is 1.0; any other value is -32009 (VersionNotSupportedError). Without
the header a request is 0.3, except that a method name only 1.0 has
(``SendMessage``, ``GetTask`` ...) is read as 1.0: the two versions share no
method name, so nothing a 0.3 client sends changes meaning, and 1.0 clients
that leave the header out (the A2A TCK's 1.0 branch) are still understood.

    operation            0.3                                  1.0
    -------------------  -----------------------------------  ---------------------------------
    send                 message/send                         SendMessage
    stream               message/stream                       SendStreamingMessage
    get                  tasks/get                            GetTask
    cancel               tasks/cancel                         CancelTask
    subscribe            tasks/resubscribe                    SubscribeToTask
    list                 (none)                               ListTasks
    push (unsupported)   tasks/pushNotificationConfig/*       *TaskPushNotificationConfig(s)
    extended card        agent/getAuthenticatedExtendedCard   GetExtendedAgentCard
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, Final

from x402srv.a2a.jsonrpc import VERSION_NOT_SUPPORTED, RpcError

__all__ = ["VERSION_HEADER", "Op", "Version", "errors_in_v1", "operation", "version_of"]

VERSION_HEADER: Final = "A2A-Version"


class Version(StrEnum):
    V03 = "0.3"
    V10 = "1.0"


class Op(StrEnum):
    SEND = "send"
    STREAM = "stream"
    GET = "get"
    CANCEL = "cancel"
    SUBSCRIBE = "subscribe"
    LIST = "list"
    PUSH = "push"
    EXTENDED_CARD = "extended-card"


METHODS: Final[dict[Version, dict[str, Op]]] = {
    Version.V03: {
        "message/send": Op.SEND,
        "message/stream": Op.STREAM,
        "tasks/get": Op.GET,
        "tasks/cancel": Op.CANCEL,
        "tasks/resubscribe": Op.SUBSCRIBE,
        "tasks/pushNotificationConfig/set": Op.PUSH,
        "tasks/pushNotificationConfig/get": Op.PUSH,
        "tasks/pushNotificationConfig/list": Op.PUSH,
        "tasks/pushNotificationConfig/delete": Op.PUSH,
        "agent/getAuthenticatedExtendedCard": Op.EXTENDED_CARD,
    },
    Version.V10: {
        "SendMessage": Op.SEND,
        "SendStreamingMessage": Op.STREAM,
        "GetTask": Op.GET,
        "CancelTask": Op.CANCEL,
        "SubscribeToTask": Op.SUBSCRIBE,
        "ListTasks": Op.LIST,
        "CreateTaskPushNotificationConfig": Op.PUSH,
        "GetTaskPushNotificationConfig": Op.PUSH,
        "ListTaskPushNotificationConfigs": Op.PUSH,
        "DeleteTaskPushNotificationConfig": Op.PUSH,
        "GetExtendedAgentCard": Op.EXTENDED_CARD,
    },
}

_VERSION = re.compile(r"\s*(\d{1,3})(?:\.(\d{1,3}))?(?:\.\d{1,6})?\s*")


def version_of(header: str | None, method: str) -> Version:
    """The version a request speaks; -32009 for a header naming one we do not."""
    if header is None or not header.strip():
        return Version.V10 if method in METHODS[Version.V10] else Version.V03
    match = _VERSION.fullmatch(header)
    major = match.group(1) if match else None
    if major == "0":
        return Version.V03
    if major == "1":
        return Version.V10
    raise RpcError(
        VERSION_NOT_SUPPORTED,
        {"detail": f"{VERSION_HEADER} {header[:20]!r} is not served here; use 0.3 or 1.0"},
    )


def operation(version: Version, method: str) -> Op | None:
    return METHODS[version].get(method)


def errors_in_v1(header: str | None, method: Any) -> bool:
    """Whether an error answer takes 1.0's form, also for a call too broken to be read.

    The header decides when it can; a version we do not serve is answered by the
    newest (its -32009 is a 1.0 error); without a header, a 1.0 method name.
    """
    try:
        return version_of(header, method if isinstance(method, str) else "") is Version.V10
    except RpcError:
        return True
