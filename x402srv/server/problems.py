"""The one place a ``ProblemError`` becomes an HTTP response (docs/errors.md).

The core decides the status, code and headers (``ProblemError.to_problem()`` and
``.headers()``); Sanic routes and the token guard only hand the error over, so
no handler picks a status code or spells a problem body itself.
"""

from __future__ import annotations

from typing import Final

from sanic.response import HTTPResponse, json

from x402srv.errors import ProblemError

__all__ = ["PROBLEM_CONTENT_TYPE", "problem_response"]

PROBLEM_CONTENT_TYPE: Final = "application/problem+json"


def problem_response(err: ProblemError) -> HTTPResponse:
    """RFC 9457 problem details with the error's status and headers (Retry-After, ...)."""
    return json(
        err.to_problem(),
        status=err.status,
        headers=err.headers(),
        content_type=PROBLEM_CONTENT_TYPE,
    )
