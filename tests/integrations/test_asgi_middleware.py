"""The ASGI middleware under Starlette's TestClient: decisions, bodies, path tricks.

The same refusals as the Sanic guard, byte for byte in meaning: the test
``test_refusals_match_the_sanic_guard`` sends the same bad requests to both.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.support.credentials import guarded_app
from tests.support.gateway import AGENT_URL, mint_token
from tests.support.seller import JWT_SECRET
from x402srv.asgi import STATE_KEY, AccessMiddleware, access_claims
from x402srv.testing.servers import free_port
from x402srv.tokens.jwks import JWKSKeySource
from x402srv.tokens.verify import AccessClaims, HS256KeySource, TokenVerifier, VerifyingKey

CARD = {"name": "Weather Oracle", "url": "http://127.0.0.1/x402/access"}


def verifier(source: Any = None) -> TokenVerifier:
    return TokenVerifier(source or HS256KeySource(JWT_SECRET), issuer=AGENT_URL, audience=AGENT_URL)


def starlette_app(token_verifier: TokenVerifier | None = None, **options: Any) -> Starlette:
    async def data(request: Request) -> JSONResponse:
        claims = request.state.x402
        return JSONResponse({"planId": claims.plan_id, "via": "state"})

    async def public(request: Request) -> JSONResponse:
        with pytest.raises(LookupError):
            access_claims(request)
        return JSONResponse({"public": True})

    async def socket(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_json({"planId": access_claims(websocket).plan_id})
        await websocket.close()

    app = Starlette(
        routes=[
            Route("/api/{rest:path}", data),
            Route("/public/{rest:path}", public),
            WebSocketRoute("/api-ws/live", socket),
        ]
    )
    app.add_middleware(
        AccessMiddleware,
        verifier=token_verifier or verifier(),
        paths=options.pop("paths", ["/api", "/api-ws"]),
        **options,
    )
    return app


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_valid_token_reaches_the_route_with_claims_on_request_state() -> None:
    token = await mint_token("daily")
    with TestClient(starlette_app()) as client:
        response = client.get("/api/data", headers=bearer(token))
    assert response.status_code == 200
    assert response.json() == {"planId": "daily", "via": "state"}


async def test_fastapi_dependency_reads_the_claims() -> None:
    app = FastAPI()
    app.add_middleware(AccessMiddleware, verifier=verifier(), paths="/api")

    @app.get("/api/weather")
    async def weather(claims: Annotated[AccessClaims, Depends(access_claims)]) -> dict[str, Any]:
        return {"plan": claims.plan_id, "payer": claims.payer}

    token = await mint_token("hourly")
    with TestClient(app) as client:
        ok = client.get("/api/weather", headers=bearer(token))
        refused = client.get("/api/weather")
    assert ok.json() == {"plan": "hourly", "payer": "0x" + "ab" * 20}
    assert refused.status_code == 401


async def test_unguarded_paths_pass_without_a_token() -> None:
    with TestClient(starlette_app()) as client:
        assert client.get("/public/x").json() == {"public": True}


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="missing"),
        pytest.param({"Authorization": "Bearer nope"}, id="malformed"),
        pytest.param({"Authorization": "Basic dXNlcjpwYXNz"}, id="not-bearer"),
    ],
)
async def test_refusals_match_the_sanic_guard(headers: dict[str, str]) -> None:
    """The same 401 problem document and headers whichever integration refuses."""
    sanic_app = guarded_app(verifier(), "middleware")
    _, sanic_response = await sanic_app.asgi_client.get("/api/data", headers=headers)
    with TestClient(starlette_app()) as client:
        response = client.get("/api/data", headers=headers)
    assert response.status_code == sanic_response.status == 401
    assert response.json() == sanic_response.json
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"] == sanic_response.headers["www-authenticate"]


async def test_expired_token_is_token_expired() -> None:
    token = await mint_token(ttl=1, issued_ago=1.1)  # (expired 0.1 s ago)
    with TestClient(starlette_app()) as client:
        response = client.get("/api/data", headers=bearer(token))
    assert response.status_code == 401
    assert response.json()["code"] == "TOKEN_EXPIRED"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api%2Fdata", id="encoded-slash"),
        pytest.param("/%61pi/data", id="encoded-letter"),
        pytest.param("/public/%2e%2e/api/data", id="encoded-dot-dot"),
    ],
)
def test_encoded_paths_cannot_bypass_the_asgi_guard(path: str) -> None:
    """Security: uvicorn/TestClient decode ``path`` before Starlette routes on it."""
    with TestClient(starlette_app()) as client:
        response = client.get(path)
    assert response.status_code == 401, response.text


def test_guarded_websocket_without_token_is_closed_with_1008() -> None:
    with (
        TestClient(starlette_app()) as client,
        pytest.raises(WebSocketDisconnect) as closed,
        client.websocket_connect("/api-ws/live") as socket,
    ):
        socket.receive_json()
    assert closed.value.code == 1008


async def test_guarded_websocket_with_token_gets_its_claims() -> None:
    token = await mint_token("daily")
    with (
        TestClient(starlette_app()) as client,
        client.websocket_connect("/api-ws/live", headers=bearer(token)) as socket,
    ):
        assert socket.receive_json() == {"planId": "daily"}


def test_agent_card_is_served_at_both_paths_and_only_for_get() -> None:
    with TestClient(starlette_app(agent_card=CARD)) as client:
        for path in ("/.well-known/agent.json", "/.well-known/agent-card.json"):
            response = client.get(path)
            assert response.status_code == 200
            assert response.json() == CARD
        assert client.head("/.well-known/agent.json").content == b""
        assert client.post("/.well-known/agent.json").status_code == 404  # the app's own answer


async def test_unreachable_jwks_is_503_not_401() -> None:
    """Keys that cannot be fetched are the seller's outage, not a bad token (real refusal)."""
    source = JWKSKeySource(f"http://127.0.0.1:{free_port()}/.well-known/jwks.json", timeout=2)
    token = await mint_token()
    with TestClient(starlette_app(verifier(source))) as client:
        response = client.get("/api/data", headers=bearer(token))
    assert response.status_code == 503
    assert response.json()["code"] == "KEY_SOURCE_UNAVAILABLE"
    assert response.headers["retry-after"] == "5"
    assert "127.0.0.1" not in response.text


class _CrashingSource:
    """A key source with a bug: a crash cannot be made real, so this one raises on purpose."""

    algorithm = "HS256"

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        raise RuntimeError("secret://internal detail")


async def test_crashing_key_source_is_a_bare_500() -> None:
    token = await mint_token()
    with TestClient(starlette_app(verifier(_CrashingSource()))) as client:
        response = client.get("/api/data", headers=bearer(token))
    assert response.status_code == 500
    assert response.json()["code"] == "INTERNAL_ERROR"
    assert "internal detail" not in response.text


def test_claims_live_under_state_x402() -> None:
    assert STATE_KEY == "x402"


def test_middleware_needs_paths() -> None:
    with pytest.raises(ValueError, match="at least one"):
        AccessMiddleware(starlette_app(), verifier=verifier(), paths=[])
