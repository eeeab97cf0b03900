"""A seller's Sanic API behind ``x402srv.guard``, verifying with x402srv's JWKS and revocation list.

``python -m tests.integrations.apps.sanic_seller PORT`` serves ``/api/weather``
behind ``access_guard`` with ``JWKSKeySource`` (``X402SRV_TEST_JWKS_URL``) and
``RevocationList`` (``X402SRV_TEST_REVOCATIONS_URL``, read again every
``X402SRV_TEST_REVOCATIONS_REFRESH`` seconds): a verifier that holds nothing
secret and no store, on its own process.
"""

from __future__ import annotations

import os
import sys

from sanic import Request, Sanic
from sanic.response import HTTPResponse, json

from x402srv.guard import access_claims, access_guard
from x402srv.tokens.jwks import JWKSKeySource
from x402srv.tokens.revocation import RevocationList
from x402srv.tokens.verify import TokenVerifier

AUDIENCE = os.environ["X402SRV_TEST_AUDIENCE"]

app = Sanic("sanic_seller")
verifier = TokenVerifier(
    JWKSKeySource(os.environ["X402SRV_TEST_JWKS_URL"]),
    issuer=AUDIENCE,
    audience=AUDIENCE,
    revocations=RevocationList(
        os.environ["X402SRV_TEST_REVOCATIONS_URL"],
        refresh_seconds=float(os.environ.get("X402SRV_TEST_REVOCATIONS_REFRESH", "1")),
    ),
)
access_guard(app, verifier, paths=["/api"])


@app.get("/api/weather")
async def weather(request: Request) -> HTTPResponse:
    return json({"plan": access_claims(request).plan_id})


@app.get("/_control/health")
async def health(request: Request) -> HTTPResponse:
    return json({"ok": True})


if __name__ == "__main__":
    app.run(
        host="127.0.0.1",
        port=int(sys.argv[1]),
        single_process=True,
        motd=False,
        access_log=False,
    )
