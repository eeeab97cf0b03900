"""Check x402srv's tokens from any code: no framework, one call."""

import os
from collections.abc import Sequence
from typing import Any

from x402srv import (
    HS256KeySource,
    InvalidToken,
    KeySourceUnavailable,
    bearer_token,
    verify_access_token,
    verify_access_token_sync,
)

KEYS = HS256KeySource(os.environ["X402SRV_JWT_SECRET"])  # or Ed25519KeySource, JWKSKeySource
ISSUER = AUDIENCE = "https://api.example.com"  # seller.agent_url (credentials.audience)


async def plan_of(authorization: Sequence[str]) -> str:
    """Async code: every value of the request's Authorization header -> the plan bought."""
    token = bearer_token(authorization)
    claims = await verify_access_token(token, KEYS, issuer=ISSUER, audience=AUDIENCE)
    return claims.plan_id


def weather(authorization: Sequence[str]) -> tuple[dict[str, Any], int, dict[str, str]]:
    """Blocking code (a Flask or Django view, a script): the body, status and headers."""
    try:
        token = bearer_token(authorization)
        claims = verify_access_token_sync(token, KEYS, issuer=ISSUER, audience=AUDIENCE)
    except (InvalidToken, KeySourceUnavailable) as err:  # 401 (TOKEN_EXPIRED too) or 503
        return err.to_problem(), err.status, err.headers()
    return {"plan": claims.plan_id}, 200, {}
