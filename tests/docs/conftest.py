"""A seller the docs' buyer samples and operator commands run against, for real.

One x402srv process for the whole session, settling with the gas wallet on the
session's anvil, whose agent card names where it really listens (the a2a-sdk
client follows the card), with a gateway route ``/api`` in front of a small
upstream API: the "seller's API" the buyer programs call with their token.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from eth_account import Account

from tests.support.seller import JWT_SECRET, Seller, settlement_table
from x402srv.devchain import Devchain
from x402srv.testing.servers import ServerProcess, free_port, seller_config


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
def docs_seller(
    devchain: Devchain, upstream_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seller]:
    env: dict[str, str] = {}
    wallet = Account.create().address
    port = free_port()
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={"backend": "sqlite", "path": "x402srv.db"},
        settlement=settlement_table("gas-wallet", devchain, None, env),
        credentials={"secret": JWT_SECRET},
        routes=[{"prefix": "/api", "upstream": upstream_url}],
    )
    config["seller"]["agent_url"] = f"http://127.0.0.1:{port}"
    server = ServerProcess(config, tmp_path_factory.mktemp("docs-seller"), env=env, port=port)
    with server:
        yield Seller(server, wallet, "gas-wallet", config, devchain)
