"""A stand-in for the seller's own key service, for the tests and for trying the issuer.

``KeyService`` serves on a free port from a thread of the calling process, so a
test can read what it minted: ``POST /keys`` mints a key (the same one again for
the same ``Idempotency-Key``, as ``key_service_issuer`` expects) and
``GET /weather`` is the seller's API, open to the keys it minted. Real HTTP, so
the issuer in a real x402srv process talks to it as it would to the real one.
"""

from __future__ import annotations

import json
import secrets
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["KeyService"]


class KeyService:
    """Mints API keys for paid challenges and checks them on the seller's API."""

    def __init__(self, admin_token: str) -> None:
        self.admin_token = admin_token
        self.minted: dict[str, dict[str, Any]] = {}  # Idempotency-Key -> the key's record
        self.mint_calls = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def mint(self, idempotency_key: str, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.mint_calls += 1
            if idempotency_key not in self.minted:
                until = datetime.now(UTC) + timedelta(seconds=int(request["ttlSeconds"]))
                self.minted[idempotency_key] = {
                    "key": "sk_test_" + secrets.token_hex(12),
                    "expiresAt": until.isoformat(),
                    "owner": request["owner"],
                    "plan": request["plan"],
                }
            return self.minted[idempotency_key]

    def holder(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return next((k for k in self.minted.values() if k["key"] == key), None)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path != "/keys":
                    return self._answer(404, {"error": "no such route"})
                if self.headers.get("Authorization") != f"Bearer {service.admin_token}":
                    return self._answer(401, {"error": "admin token required"})
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                minted = service.mint(self.headers["Idempotency-Key"], body)
                self._answer(201, {"key": minted["key"], "expiresAt": minted["expiresAt"]})

            def do_GET(self) -> None:
                scheme, _, key = self.headers.get("Authorization", "").partition(" ")
                holder = service.holder(key) if scheme == "Bearer" else None
                if self.path != "/weather" or holder is None:
                    return self._answer(401, {"error": "a key from a purchase, please"})
                self._answer(200, {"forecast": "sunny", "plan": holder["plan"]})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test output stays readable

        return Handler

    def __enter__(self) -> KeyService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
