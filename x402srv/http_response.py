"""``Response``: Sanic's ``HTTPResponse`` with a cheaper header check for long values.

Sanic strips CR, LF and NUL from every header value with ``str.translate``,
which walks the value character by character in Python's slow path: for the
~1 KB base64 ``PAYMENT-REQUIRED`` of every 402 that was the largest single cost
of answering one. Here the value is first searched for those three characters
(``in``, a C ``memchr``) and translated only if one occurs, so what goes on the
wire is exactly what Sanic would send.
"""

from __future__ import annotations

from sanic.response import HTTPResponse
from sanic.response.types import HEADER_TRANSLATION_TABLE

__all__ = ["Response"]


class Response(HTTPResponse):
    __slots__ = ()

    @staticmethod
    def _sanitize_header_value(value: str) -> str:
        if "\r" in value or "\n" in value or "\x00" in value:
            return value.translate(HEADER_TRANSLATION_TABLE)
        return value
