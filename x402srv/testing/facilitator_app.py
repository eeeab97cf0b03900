"""A local x402 v2 facilitator HTTP server built from the official ``x402`` SDK.

    python -m x402srv.testing.facilitator_app --rpc-url URL --network eip155:31337 --port P
    (the signer key comes from the environment variable X402SRV_FACILITATOR_KEY)

``x402FacilitatorSync`` + ``register_exact_evm_facilitator`` + ``FacilitatorWeb3Signer``
do all the work; this module only speaks HTTP (``GET /supported``, ``POST
/verify``, ``POST /settle``). The SDK's sync facilitator blocks, so requests are
served on threads (stdlib ``ThreadingHTTPServer``), never on an event loop.

One change to the SDK's signer, for a local chain: it waits for a settlement's
receipt with web3's default 100 ms between polls, and anvil mines a moment
after it accepts the transaction, so nearly every settle slept 100 ms after the
transfer was already final. Here it polls every 5 ms (``RECEIPT_POLL_SECONDS``).
Everything that uses this facilitator (x402srv's facilitator strategy and the
official middleware in ``bench``) gets the same one.

``--fault`` turns it into the faulty facilitator the fault tests need, doing the
real work first where a real facilitator could fail after it:

    settle-drop        /settle drops the connection without an answer (outcome unknown)
    settle-hang        /settle never answers and never settles
    settle-late        /settle answers nothing for --delay seconds (past the caller's
                       timeout), then really settles on-chain
    settle-500-after   /settle really settles on-chain, then answers HTTP 500
    settle-400-after   /settle really settles on-chain, then answers HTTP 400 with a
                       body that names the transaction
    settle-lie         /settle claims success with a made-up transaction, settles nothing

``--record FILE`` appends every POST body it receives to FILE (JSON lines), so a
test can check what a third party gets to see.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FAULTS", "RECEIPT_POLL_SECONDS", "main"]

FAULTS = [
    "settle-drop",
    "settle-hang",
    "settle-late",
    "settle-500-after",
    "settle-400-after",
    "settle-lie",
]

#: Seconds between receipt polls while a settle waits for its transaction.
RECEIPT_POLL_SECONDS = 0.005


def _build(rpc_url: str, network: str, key: str) -> Any:
    from eth_typing import HexStr
    from x402 import x402FacilitatorSync
    from x402.mechanisms.evm import FacilitatorWeb3Signer
    from x402.mechanisms.evm.constants import TX_STATUS_SUCCESS
    from x402.mechanisms.evm.exact import register_exact_evm_facilitator
    from x402.mechanisms.evm.types import TransactionReceipt

    class LocalChainSigner(FacilitatorWeb3Signer):
        """The SDK's signer; only the receipt wait polls faster (same result)."""

        def wait_for_transaction_receipt(self, tx_hash: str) -> Any:
            if not tx_hash.startswith("0x"):
                tx_hash = "0x" + tx_hash
            receipt = self._w3.eth.wait_for_transaction_receipt(
                HexStr(tx_hash),
                timeout=self._confirmation_timeout_seconds,
                poll_latency=RECEIPT_POLL_SECONDS,
            )
            return TransactionReceipt(
                status=TX_STATUS_SUCCESS if receipt["status"] == 1 else 0,
                block_number=receipt["blockNumber"],
                tx_hash=tx_hash,
                logs=list(receipt.get("logs") or []),
            )

    facilitator = x402FacilitatorSync()
    signer = LocalChainSigner(private_key=key, rpc_url=rpc_url)
    register_exact_evm_facilitator(facilitator, signer, networks=network)
    return facilitator


def _handler(
    facilitator: Any, fault: str | None, delay: float, record: str | None
) -> type[BaseHTTPRequestHandler]:
    from x402.schemas import PaymentPayload, PaymentRequirements

    recording = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in two writes; with Nagle's algorithm on, the body
        # of every answer on a kept-alive connection waited for the client's
        # delayed ACK (~40 ms).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output quiet; payloads must not be logged anyway

        def _answer(self, status: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if not self.path.rstrip("/").endswith("/supported"):
                self._answer(404, {"error": "not found"})
                return
            supported = facilitator.get_supported()
            self._answer(200, supported.model_dump(by_alias=True, exclude_none=True))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if record:
                with recording, open(record, "ab") as out:
                    out.write(raw.replace(b"\n", b" ") + b"\n")
            try:
                body = json.loads(raw)
                payload = PaymentPayload.model_validate(body["paymentPayload"])
                requirements = PaymentRequirements.model_validate(body["paymentRequirements"])
            except (ValueError, KeyError, TypeError):
                self._answer(400, {"error": "invalid request"})
                return
            path = "/" + self.path.rstrip("/").rsplit("/", 1)[-1]  # any mount prefix
            if path == "/verify":
                result = facilitator.verify(payload, requirements)
            elif path == "/settle":
                if fault == "settle-drop":
                    self.close_connection = True
                    return
                if fault == "settle-hang":
                    time.sleep(3600)
                    return
                if fault == "settle-late":
                    time.sleep(delay)
                if fault == "settle-lie":
                    self._answer(
                        200,
                        {
                            "success": True,
                            "transaction": "0x" + secrets.token_hex(32),
                            "network": requirements.network,
                            "payer": payload.payload["authorization"]["from"],
                        },
                    )
                    return
                result = facilitator.settle(payload, requirements)
                if fault == "settle-500-after":
                    self._answer(500, {"error": "internal error"})
                    return
                if fault == "settle-400-after":
                    answer = result.model_dump(by_alias=True, exclude_none=True)
                    self._answer(400, {**answer, "success": False, "errorReason": "bad_request"})
                    return
            else:
                self._answer(404, {"error": "not found"})
                return
            self._answer(200, result.model_dump(by_alias=True, exclude_none=True))

    return Handler


class _Server(ThreadingHTTPServer):
    # The stdlib's listen backlog of 5 resets connections when many buyers pay at once.
    request_queue_size = 256


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="x402srv.testing.facilitator_app")
    parser.add_argument("--rpc-url", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, default=None)
    parser.add_argument("--delay", type=float, default=3.0)
    parser.add_argument("--record", default=None, help="append every POST body to this file")
    args = parser.parse_args(argv)
    key = os.environ["X402SRV_FACILITATOR_KEY"]
    facilitator = _build(args.rpc_url, args.network, key)
    server = _Server(
        ("127.0.0.1", args.port), _handler(facilitator, args.fault, args.delay, args.record)
    )
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    thread.join()


if __name__ == "__main__":
    main()
