"""A seller the docs' buyer samples and operator commands run against, for real.

One x402srv process for the whole session, settling with the gas wallet on the
session's anvil, whose agent card names where it really listens (the a2a-sdk
client follows the card), with a gateway route ``/api`` in front of a small
upstream API: the "seller's API" the buyer programs call with their token.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.seller import Seller


class _Upstream(BaseHTTPRequestHandler):
    """The seller's existing API behind the gateway: says what it was asked, and for whom."""

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "payer": self.headers.get("X-X402-Payer")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def upstream_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="session")
def docs_seller(start_seller: Callable[..., Seller], upstream_url: str) -> Seller:
    return start_seller(
        "gas-wallet", routes=[{"prefix": "/api", "upstream": upstream_url}], real_card_url=True
    )
