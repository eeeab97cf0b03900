"""A FastAPI app open only to x402srv's tokens (pip install "x402srv[asgi]")."""

from typing import Annotated, Any

from fastapi import Depends, FastAPI

from x402srv import (
    AccessClaims,
    AccessMiddleware,
    TokenVerifier,
    agent_card,
    asgi_access_claims,
    load_config,
)

config = load_config("seller.toml")  # the same file x402srv serves
app = FastAPI()
app.add_middleware(
    AccessMiddleware,
    verifier=TokenVerifier.from_config(config),  # or the JWKS verifier
    paths=["/api"],  # prefixes (or a predicate on the ASGI scope)
    agent_card=agent_card(config),  # optional: /.well-known/agent(-card).json here
)


@app.get("/api/weather")
async def weather(claims: Annotated[AccessClaims, Depends(asgi_access_claims)]) -> dict[str, Any]:
    return {"plan": claims.plan_id, "buyer": claims.payer}  # also request.state.x402
