"""A2A 1.0 JSON <-> the 0.3 JSON the service speaks: a mechanical translation at the edge.

1.0 (ProtoJSON of ``a2a.proto``) names the same objects differently; the
service reads and writes 0.3, and 1.0 requests and answers pass through here:

    0.3                                   1.0
    ------------------------------------  ---------------------------------------------
    {"kind": "text", "text"}              {"text"}
    {"kind": "data", "data"}              {"data"}
    {"kind": "file", "file": {uri|bytes,  {"url"|"raw", "filename", "mediaType"}
      name, mimeType}}
    role "user" / "agent"                 "ROLE_USER" / "ROLE_AGENT"
    state "input-required"                "TASK_STATE_INPUT_REQUIRED"
    configuration.pushNotificationConfig  configuration.taskPushNotificationConfig
    message/send result: Task | Message   {"task": Task} | {"message": Message}
    stream event: Task, Message,          {"task"}, {"message"},
      {"kind": "status-update", final},   {"statusUpdate"} (no "final"),
      {"kind": "artifact-update"}         {"artifactUpdate"}

A request that does not translate is left as it is, so the 0.3 models reject it
with the usual -32602 (a part with no content or two, an unknown role ...).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["event", "message_in", "send_params", "send_result", "task"]

_CONTENT: Final = ("text", "data", "url", "raw")
_ROLES_IN: Final = {"ROLE_USER": "user", "ROLE_AGENT": "agent"}
_ROLES_OUT: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}


# ------------------------------------------------------------------ requests (1.0 -> 0.3)


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    present = [key for key in _CONTENT if key in part]
    if len(present) != 1:
        return part
    key = present[0]
    rest = {k: v for k, v in part.items() if k not in (key, "filename", "mediaType")}
    if key in ("text", "data"):
        return {"kind": key, key: part[key], **rest}
    file: dict[str, Any] = {"uri" if key == "url" else "bytes": part[key]}
    if "filename" in part:
        file["name"] = part["filename"]
    if "mediaType" in part:
        file["mimeType"] = part["mediaType"]
    return {"kind": "file", "file": file, **rest}


def message_in(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    translated = {"kind": "message", **message}
    role = message.get("role")
    if isinstance(role, str) and role in _ROLES_IN:
        translated["role"] = _ROLES_IN[role]
    parts = message.get("parts")
    if isinstance(parts, list):
        translated["parts"] = [_part_in(part) for part in parts]
    return translated


def send_params(params: dict[str, Any]) -> dict[str, Any]:
    """``SendMessageRequest`` as 0.3 ``MessageSendParams``."""
    translated = dict(params)
    translated.pop("tenant", None)
    if "message" in params:
        translated["message"] = message_in(params["message"])
    configuration = params.get("configuration")
    if isinstance(configuration, dict) and "taskPushNotificationConfig" in configuration:
        configuration = dict(configuration)
        configuration["pushNotificationConfig"] = configuration.pop("taskPushNotificationConfig")
        translated["configuration"] = configuration
    return translated


# ------------------------------------------------------------------ answers (0.3 -> 1.0)


def _part_out(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    rest = {k: v for k, v in part.items() if k not in ("kind", "text", "data", "file")}
    if kind in ("text", "data"):
        return {kind: part[kind], **rest}
    file = part.get("file", {})
    out: dict[str, Any] = {"url": file["uri"]} if "uri" in file else {"raw": file.get("bytes")}
    if "name" in file:
        out["filename"] = file["name"]
    if "mimeType" in file:
        out["mediaType"] = file["mimeType"]
    return {**out, **rest}


def _message(message: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "kind"}
    out["role"] = _ROLES_OUT.get(message.get("role", ""), "ROLE_UNSPECIFIED")
    out["parts"] = [_part_out(part) for part in message.get("parts", [])]
    return out


def _status(status: dict[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["state"] = "TASK_STATE_" + str(status["state"]).upper().replace("-", "_")
    if "message" in status:
        out["message"] = _message(status["message"])
    return out


def _artifact(artifact: dict[str, Any]) -> dict[str, Any]:
    return {**artifact, "parts": [_part_out(part) for part in artifact.get("parts", [])]}


def task(document: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in document.items() if k != "kind"}
    out["status"] = _status(document["status"])
    if "history" in document:
        out["history"] = [_message(message) for message in document["history"]]
    if "artifacts" in document:
        out["artifacts"] = [_artifact(artifact) for artifact in document["artifacts"]]
    return out


def send_result(result: dict[str, Any]) -> dict[str, Any]:
    """``SendMessageResponse``: the Task or the Message, named."""
    if result.get("kind") == "message":
        return {"message": _message(result)}
    return {"task": task(result)}


def event(document: dict[str, Any]) -> dict[str, Any]:
    """A stream event as ``StreamResponse``."""
    kind = document.get("kind")
    if kind == "status-update":
        update = {k: v for k, v in document.items() if k not in ("kind", "final")}
        update["status"] = _status(document["status"])
        return {"statusUpdate": update}
    if kind == "artifact-update":
        update = {k: v for k, v in document.items() if k != "kind"}
        update["artifact"] = _artifact(document["artifact"])
        return {"artifactUpdate": update}
    return send_result(document)
