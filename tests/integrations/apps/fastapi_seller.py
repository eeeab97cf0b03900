"""A seller's FastAPI app protected by ``x402srv.asgi.AccessMiddleware``, as in the README.

Run under uvicorn by the tests. It reads the same seller TOML as the x402srv
process it sells through (``X402SRV_TEST_CONFIG``) for the agent card, and
verifies tokens either with the config's own key or, when
``X402SRV_TEST_JWKS_URL`` is set, with x402srv's published JWKS; with
``X402SRV_TEST_REVOCATIONS_URL`` it also refuses revoked grants, read from
x402srv's published revocation list.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from fastapi import Depends, FastAPI

from x402srv.asgi import AccessMiddleware, access_claims
from x402srv.config.models import load_config
from x402srv.tokens.jwks import JWKSKeySource
from x402srv.tokens.revocation import RevocationList
from x402srv.tokens.verify import AccessClaims, TokenVerifier
from x402srv.wire.card import agent_card

config = load_config(os.environ["X402SRV_TEST_CONFIG"])
jwks_url = os.environ.get("X402SRV_TEST_JWKS_URL")
revocations_url = os.environ.get("X402SRV_TEST_REVOCATIONS_URL")
revocations = (
    RevocationList(
        revocations_url,
        refresh_seconds=float(os.environ.get("X402SRV_TEST_REVOCATIONS_REFRESH", "1")),
    )
    if revocations_url
    else None
)
if jwks_url:
    verifier = TokenVerifier(
        JWKSKeySource(jwks_url),
        issuer=config.seller.agent_url,
        audience=config.credentials.audience or config.seller.agent_url,
        revocations=revocations,
    )
else:
    verifier = TokenVerifier.from_config(config, revocations=revocations)

app = FastAPI()
app.add_middleware(
    AccessMiddleware, verifier=verifier, paths=["/api"], agent_card=agent_card(config)
)


@app.get("/api/weather")
async def weather(claims: Annotated[AccessClaims, Depends(access_claims)]) -> dict[str, Any]:
    return {"forecast": "sunny", "plan": claims.plan_id, "sub": claims.request_id}


@app.get("/_control/health")
async def health() -> dict[str, bool]:
    return {"ok": True}
