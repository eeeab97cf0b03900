"""A load-balanced RPC whose nodes lag: the authorization is used, its receipt not visible yet.

A fault proxy sits between x402srv and anvil and answers every
``eth_getTransactionReceipt`` with ``null`` while the test says so, the way a
node behind the one that mined the transaction answers. Everything else reaches
the chain, so ``authorizationState`` already says "used". Nothing may be
released on that evidence (docs/protocol/states.md: a missing receipt means "not decided
yet"): the buyer gets 502 SETTLEMENT_PENDING, a reconciler pass changes
nothing, and once the receipts show, the same retry gets the grant. The proxy
hides and shows receipts when the test flips its switch; nothing here waits on
a timer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.cli import x402srv
from tests.support.problems import assert_problem
from tests.support.seller import GAS_KEY_ENV, Seller
from x402srv.devchain import Devchain
from x402srv.testing.servers import free_port

HOURLY = 100_000


class LaggingRpc:
    """A JSON-RPC proxy to ``upstream`` that can hide transaction receipts."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.hide_receipts = False
        self.hidden = 0  # receipts answered with null so far
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                call = json.loads(raw)
                hide = isinstance(call, dict) and call.get("method") == "eth_getTransactionReceipt"
                if proxy.hide_receipts and hide:
                    proxy.hidden += 1
                    answer = json.dumps({"jsonrpc": "2.0", "id": call.get("id"), "result": None})
                    body = answer.encode()
                else:
                    body = httpx.post(
                        proxy.upstream,
                        content=raw,
                        headers={"Content-Type": "application/json"},
                        timeout=30,
                    ).content
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> LaggingRpc:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def lagging_rpc(devchain: Devchain) -> Iterator[LaggingRpc]:
    with LaggingRpc(devchain.rpc_url) as proxy:
        yield proxy


def show(seller: Seller, challenge_id: str) -> dict[str, Any]:
    """``x402srv challenges show``: the record as an operator sees it."""
    shown = x402srv(seller, "challenges", "show", challenge_id)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def test_used_authorization_without_a_visible_receipt_is_never_released(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    lagging_rpc: LaggingRpc,
    buyer: LocalAccount,
) -> None:
    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    seller = start_seller(
        "gas-wallet",
        settlement={
            "strategy": "gas-wallet",
            "gas_wallet_private_key": {"env": GAS_KEY_ENV},
            "gas-wallet": {"receipt_timeout_seconds": 1},
        },
        env={GAS_KEY_ENV: "0x" + bytes(gas.key).hex()},
        network={
            "asset": devchain.token.address,
            "asset_name": "USD Coin",
            "asset_version": "2",
            "decimals": 6,
            "rpc_url": lagging_rpc.url,
        },
    )
    payment = seller.pay_with(buyer, "hourly")
    nonce = payment.nonce
    header = payment.header
    request: dict[str, Any] = {
        "json": {"planId": "hourly"},
        "headers": {"PAYMENT-SIGNATURE": header},
    }

    lagging_rpc.hide_receipts = True
    pending = httpx.post(seller.access_url, timeout=30, **request)
    assert_problem(pending, 502, "SETTLEMENT_PENDING")
    assert devchain.authorization_state(buyer.address, nonce), "the transfer is on-chain"
    assert seller.balance() == HOURLY
    assert lagging_rpc.hidden > 0

    # The buyer retries, an operator reconciles: still no receipt, so still undecided.
    again = httpx.post(seller.access_url, timeout=30, **request)
    assert_problem(again, 502, "SETTLEMENT_PENDING")
    ran = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert ran.returncode == 0, ran.stderr
    reconciled = ran.stdout
    assert f"{payment.challenge_id}  unresolved" in reconciled
    assert "SETTLING -> PENDING" not in reconciled
    record = show(seller, payment.challenge_id)
    assert record["state"] == "SETTLING"
    assert [step["state"] for step in record["history"]].count("PENDING") == 1, record["history"]

    lagging_rpc.hide_receipts = False
    granted = httpx.post(seller.access_url, timeout=30, **request)
    assert granted.status_code == 200, granted.text
    assert granted.json()["challengeId"] == payment.challenge_id
    assert seller.balance() == HOURLY
