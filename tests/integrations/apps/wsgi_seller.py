"""Any app, protected with the framework-free function: a stdlib WSGI server, no framework.

``python -m tests.integrations.apps.wsgi_seller PORT`` serves ``/api/weather``
behind ``verify_access_token_sync`` with x402srv's JWKS (``X402SRV_TEST_JWKS_URL``,
issuer/audience ``X402SRV_TEST_AUDIENCE``): the blocking twin and the
``httpx.Client`` fetch path, in a real server. With ``X402SRV_TEST_REVOCATIONS_URL``
it also reads x402srv's revocation list (blocking, every second).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from x402srv.errors import InvalidToken, KeySourceUnavailable, RevocationsUnavailable
from x402srv.tokens.admission import bearer_token
from x402srv.tokens.jwks import JWKSKeySource
from x402srv.tokens.revocation import RevocationList
from x402srv.tokens.verify import verify_access_token_sync

AUDIENCE = os.environ["X402SRV_TEST_AUDIENCE"]
KEYS = JWKSKeySource(os.environ["X402SRV_TEST_JWKS_URL"])
_LIST = os.environ.get("X402SRV_TEST_REVOCATIONS_URL")
REVOKED = RevocationList(_LIST, refresh_seconds=1) if _LIST else None

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if path == "/_control/health":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']
    if path != "/api/weather":
        start_response("404 Not Found", [])
        return [b""]
    header = environ.get("HTTP_AUTHORIZATION")
    try:
        claims = verify_access_token_sync(
            bearer_token([header] if header else []),
            KEYS,
            issuer=AUDIENCE,
            audience=AUDIENCE,
            revocations=REVOKED,
        )
    except (InvalidToken, KeySourceUnavailable, RevocationsUnavailable) as err:
        headers = [("Content-Type", "application/problem+json"), *err.headers().items()]
        start_response(f"{err.status} {err.title}", headers)
        return [json.dumps(err.to_problem()).encode()]
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"plan": claims.plan_id, "payer": claims.payer}).encode()]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


if __name__ == "__main__":
    with make_server("127.0.0.1", int(sys.argv[1]), app, handler_class=_Quiet) as server:
        server.serve_forever()
