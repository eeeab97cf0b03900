"""Logging for the ``x402srv`` command: JSON lines when not on a TTY, a request id on each.

Every HTTP request gets an id (the client's ``X-Request-Id`` when it is a sane
token, else a fresh one); it is echoed in the response's ``X-Request-Id`` and
put on every log line written while handling the request, so one purchase can
be followed across lines (and, with its challengeId, across retries).
The id of a Sanic request is made on first use (``http_request_id``) and found
through Sanic's current-request context; other code can set ``request_id_var``.

What never goes into a log line: signatures, tokens, keys, payloads,
credentialed URLs, a purchase's ``requestId`` or ``resourceId``, and an A2A
task's id (the ``requestId`` and the task id fetch the grant, docs/design.md
"Who gets a grant"): a line names a purchase by its challengeId and
``fingerprint(requestId)``, a task by ``fingerprint(task_id)``. HTTP and
RPC client libraries log request URLs (httpx at INFO, web3 at DEBUG), so those
loggers are held at WARNING.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from sanic import Request
from sanic.exceptions import SanicException

from x402srv.access.ids import uuid4_hex

__all__ = [
    "REQUEST_ID_HEADER",
    "configure_logging",
    "current_request_id",
    "fingerprint",
    "http_request_id",
    "new_request_id",
    "request_id_var",
]

QUIET_LOGGERS = ("httpx", "httpcore", "web3", "urllib3", "websockets", "sanic.root")
REQUEST_ID_HEADER = "X-Request-Id"
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "x402srv_request_id", default=None
)


#: Hex digits of a fingerprint: enough to tell a seller's purchases apart in logs.
FINGERPRINT_CHARS = 8


def fingerprint(secret: str) -> str:
    """The first 8 hex digits of SHA-256: how a log line names a ``requestId``.

    Unkeyed on purpose: an operator who has the id (the console, ``challenges
    show``) finds its lines with ``printf %s ID | sha256sum | cut -c1-8``, in
    every worker's log and across restarts. It gives nothing back: a
    requestId this server makes is a random UUID (122 bits), so 32 bits of its
    hash neither reveal it nor narrow a search for it; one a client chose
    (a body's ``requestId``) is as secret as the client made it anyway.
    """
    return hashlib.sha256(secret.encode()).hexdigest()[:FINGERPRINT_CHARS]


def current_request_id() -> str | None:
    """The id of the request being handled: ``request_id_var``, else Sanic's current request."""
    found = request_id_var.get()
    if found is not None:
        return found
    try:
        request = Request.get_current()
    except SanicException:  # not handling a request (start-up, the reconciler ...)
        return None
    return http_request_id(request)


def http_request_id(request: Request) -> str:
    """The request's id, made (and kept on ``request.ctx``) the first time it is asked for."""
    found: str | None = getattr(request.ctx, "request_id", None)
    if found is None:
        found = request.ctx.request_id = new_request_id(request.headers.get(REQUEST_ID_HEADER))
    return found


def new_request_id(offered: str | None) -> str:
    """The client's id if it is a sane token (so its own logs line up), else a fresh one."""
    if offered and _SANE_ID.fullmatch(offered):
        return offered
    return uuid4_hex()


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id_http"):
            record.request_id_http = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                line["http_request_id" if key == "request_id_http" else key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rid)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id_http", None)
        record.rid = f" [{rid}]" if rid else ""
        return super().format(record)


def configure_logging(level: int = logging.INFO, *, json_lines: bool | None = None) -> None:
    """Root handler on stderr; JSON unless stderr is a terminal (``json_lines`` overrides)."""
    use_json = (not sys.stderr.isatty()) if json_lines is None else json_lines
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if use_json else TextFormatter())
    handler.addFilter(_RequestIdFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Neither format shows where a call was made, nor thread or process names, so
    # records need not look them up (the logging HOWTO's "Optimization"): walking
    # the stack for the caller was a third of the cost of a log line.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
