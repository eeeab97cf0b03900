"""The one place a payment offer becomes a 402, and the ``Response`` class that sends it.

``offer_response`` is how ``/x402/access`` and the gateway both answer an offer
(docs/protocol/wire.md: the JSON body, ``PAYMENT-REQUIRED`` and ``Cache-Control: no-store``).

``Response`` is Sanic's ``HTTPResponse`` with a cheaper header check for long
values. Sanic strips CR, LF and NUL from every header value with
``str.translate``, which walks the value character by character in Python's slow
path: for the ~1 KB base64 ``PAYMENT-REQUIRED`` of every 402 that was the
largest single cost of answering one. Here the value is first searched for those
three characters (``in``, a C ``memchr``) and translated only if one occurs, so
what goes on the wire is exactly what Sanic would send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sanic.response import HTTPResponse
from sanic.response.types import HEADER_TRANSLATION_TABLE

if TYPE_CHECKING:
    from x402srv.wire.offers import PaymentOffer

__all__ = ["Response", "offer_response"]


class Response(HTTPResponse):
    __slots__ = ()

    @staticmethod
    def _sanitize_header_value(value: str) -> str:
        if "\r" in value or "\n" in value or "\x00" in value:
            return value.translate(HEADER_TRANSLATION_TABLE)
        return value


def offer_response(offer: PaymentOffer) -> HTTPResponse:
    """A 402 for ``offer``: its compact JSON body and header, never cached."""
    headers = {"PAYMENT-REQUIRED": offer.header, "Cache-Control": "no-store"}
    return Response(offer.content, 402, headers, "application/json")
