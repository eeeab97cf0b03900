"""``x402srv.server.responses.Response`` sends exactly the headers Sanic would."""

from __future__ import annotations

import pytest
from sanic.response import HTTPResponse

from x402srv.server.responses import Response


@pytest.mark.parametrize(
    "value", ["plain", "x" * 2000, "with\r\nCRLF", "nul\x00byte", "lf\nonly", "ünï"]
)
def test_header_values_are_sanitised_like_sanic_does(value: str) -> None:
    ours = Response(b"{}", 402, {"PAYMENT-REQUIRED": value, "X-Name\r\n": "v"})
    sanic = HTTPResponse(b"{}", 402, {"PAYMENT-REQUIRED": value, "X-Name\r\n": "v"})
    assert list(ours.processed_headers) == list(sanic.processed_headers)
