"""The seller's own API (Sanic), open only to x402srv's tokens."""

from sanic import Request, Sanic
from sanic.response import HTTPResponse, json

from x402srv import TokenVerifier, access_claims, access_guard, load_config, require_access

app = Sanic("weather_api")
verifier = TokenVerifier.from_config(load_config("seller.toml"))  # fails at start if no usable key


@app.get("/weather")
@require_access(verifier)
async def weather(request: Request) -> HTTPResponse:
    claims = access_claims(request)  # typed: also on request.ctx.x402
    return json({"plan": claims.plan_id, "buyer": claims.payer, "until": claims.expires_at})


# or guard whole path prefixes:
access_guard(app, verifier, paths=["/api"])
