"""The token guard on a real Sanic app: what passes, what is guarded, how refusals look."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sanic import Request, Sanic
from sanic.response import HTTPResponse
from sanic.response import json as json_response

from tests.support.credentials import (
    AGENT_URL,
    FROZEN_NOW,
    SECRET,
    TTL,
    FrozenClock,
    assert_refused,
    bearer,
    build_issuer,
    grant_request,
    guarded_app,
    make_config,
)
from x402srv.errors import ConfigError, SettlementInProgress, TokenExpired
from x402srv.guard import CLAIMS_ATTRIBUTE, access_claims, access_guard, require_access
from x402srv.server.problems import problem_response
from x402srv.tokens.verify import AccessClaims, TokenVerifier, VerifyingKey


async def issued_token(clock: FrozenClock, **credentials: Any) -> str:
    config = make_config(**(credentials or {"secret": SECRET}))
    return str((await build_issuer("jwt", config, clock).issue(grant_request())).token)


def verifier_for(clock: FrozenClock, **credentials: Any) -> TokenVerifier:
    return TokenVerifier.from_config(
        make_config(**(credentials or {"secret": SECRET})), clock=clock
    )


@pytest.mark.parametrize("style", ["decorator", "middleware"])
async def test_valid_token_puts_typed_claims_on_the_request(clock: FrozenClock, style: str) -> None:
    app = guarded_app(verifier_for(clock), style)
    request, response = await app.asgi_client.get(
        "/api/data", headers=bearer(await issued_token(clock))
    )
    assert response.status == 200
    assert response.json == {"handler": "data", "planId": "hourly"}
    claims = getattr(request.ctx, CLAIMS_ATTRIBUTE)
    assert CLAIMS_ATTRIBUTE == "x402"
    assert isinstance(claims, AccessClaims)
    assert claims is request.ctx.x402
    assert access_claims(request) is claims
    assert claims.request_id == "6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11"
    assert claims.expires_at == FROZEN_NOW + TTL


async def test_eddsa_grant_token_opens_the_route(clock: FrozenClock, ed25519_pem: str) -> None:
    credentials = {"algorithm": "EdDSA", "private_key": ed25519_pem}
    app = guarded_app(verifier_for(clock, **credentials), "decorator")
    token = await issued_token(clock, **credentials)
    _, response = await app.asgi_client.get("/api/data", headers=bearer(token))
    assert response.status == 200


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
async def test_scheme_is_case_insensitive(clock: FrozenClock, scheme: str) -> None:
    app = guarded_app(verifier_for(clock), "middleware")
    token = await issued_token(clock)
    _, response = await app.asgi_client.get(
        "/api/data", headers={"Authorization": f"{scheme} {token}"}
    )
    assert response.status == 200


async def test_token_expires_with_the_verifier_clock(clock: FrozenClock) -> None:
    app = guarded_app(verifier_for(clock), "decorator")
    headers = bearer(await issued_token(clock))
    clock.advance(TTL)
    _, response = await app.asgi_client.get("/api/data", headers=headers)
    body = assert_refused(response, code="TOKEN_EXPIRED")
    assert body == TokenExpired("The access token has expired.").to_problem()


async def test_middleware_guards_only_the_given_prefixes(clock: FrozenClock) -> None:
    app: Sanic[Any, Any] = Sanic("x402srv-guard-prefixes")
    app.config.TOUCHUP = False
    access_guard(app, verifier_for(clock), paths=["/api", "/admin/"])

    async def reached(request: Request, **_: Any) -> HTTPResponse:
        return json_response({"path": request.path})

    routes = ["/api", "/api/a/b", "/apix", "/admin/users", "/administrator", "/public", "/<x>/api"]
    for index, uri in enumerate(routes):
        app.add_route(reached, uri, name=f"route{index}")

    token = await issued_token(clock)
    guarded = ["/api", "/api/", "/api/a/b", "/admin/users", "/api/nowhere"]
    open_ = ["/apix", "/administrator", "/public", "/v1/api"]
    for path in guarded:
        _, refused = await app.asgi_client.get(path)
        assert_refused(refused)
        _, admitted = await app.asgi_client.get(path, headers=bearer(token))
        assert admitted.status in (200, 404), path
    for path in open_:
        _, response = await app.asgi_client.get(path)
        assert response.status == 200, path


async def test_middleware_with_a_predicate_and_a_single_prefix(clock: FrozenClock) -> None:
    verifier = verifier_for(clock)
    app: Sanic[Any, Any] = Sanic("x402srv-guard-predicate")
    app.config.TOUCHUP = False
    access_guard(app, verifier, paths=lambda request: request.method == "POST")

    async def handler(request: Request) -> HTTPResponse:
        return json_response({"ok": True})

    app.add_route(handler, "/things", methods=["GET", "POST"])
    _, read = await app.asgi_client.get("/things")
    _, write = await app.asgi_client.post("/things")
    assert read.status == 200
    assert_refused(write)

    single: Sanic[Any, Any] = Sanic("x402srv-guard-single")
    single.config.TOUCHUP = False
    access_guard(single, verifier, paths="/things")
    single.add_route(handler, "/things")
    _, response = await single.asgi_client.get("/things")
    assert_refused(response)


@pytest.mark.parametrize("paths", [[], ["api"]])
def test_bad_prefixes_are_refused_when_the_guard_is_added(paths: list[str]) -> None:
    app: Sanic[Any, Any] = Sanic("x402srv-guard-bad-prefix")
    with pytest.raises(ValueError, match="path"):
        access_guard(app, TokenVerifier.from_config(make_config(secret=SECRET)), paths=paths)


async def test_unguarded_route_has_no_claims(clock: FrozenClock) -> None:
    app = guarded_app(verifier_for(clock), "decorator")
    request, response = await app.asgi_client.get("/public")
    assert response.status == 200
    with pytest.raises(LookupError):
        access_claims(request)


class _BrokenKeySource:
    """A key source that crashes (as a JWKS fetch might): a crash cannot be made real here."""

    algorithm = "HS256"

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        raise RuntimeError("jwks fetch from https://keys.internal:8443/?api_key=hunter2 failed")


@pytest.mark.parametrize("style", ["decorator", "middleware"])
async def test_crashing_verifier_is_a_bare_500(
    clock: FrozenClock, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    verifier = TokenVerifier(_BrokenKeySource(), issuer=AGENT_URL, audience=AGENT_URL, clock=clock)
    app = guarded_app(verifier, style)
    with caplog.at_level(logging.ERROR, logger="x402srv.guard"):
        _, response = await app.asgi_client.get(
            "/api/data", headers=bearer(await issued_token(clock))
        )
    assert response.status == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json == {
        "type": "about:blank",
        "title": "Internal error",
        "status": 500,
        "detail": "Internal error",
        "code": "INTERNAL_ERROR",
    }
    assert "hunter2" not in response.text
    assert "keys.internal" not in response.text
    assert any(record.exc_info for record in caplog.records)  # the operator still learns why


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param({}, id="no-secret"),
        pytest.param({"secret": "short"}, id="short-secret"),
        pytest.param({"algorithm": "EdDSA"}, id="no-private-key"),
        pytest.param({"algorithm": "EdDSA", "private_key": "-----BEGIN"}, id="bad-pem"),
    ],
)
def test_guard_with_unusable_key_fails_at_construction(credentials: dict[str, Any]) -> None:
    """The app never gets to serve: building the guard's verifier raises, not a request."""
    app: Sanic[Any, Any] = Sanic("x402srv-guard-unusable")
    with pytest.raises(ConfigError):
        require_access(TokenVerifier.from_config(make_config(**credentials)))
    with pytest.raises(ConfigError):
        access_guard(app, TokenVerifier.from_config(make_config(**credentials)), paths=["/api"])
    assert not app.request_middleware


def test_problem_response_carries_status_body_and_headers() -> None:
    error = SettlementInProgress("being settled", retry_after=3, extra={"challengeId": "c1"})
    response = problem_response(error)
    assert response.status == 409
    assert response.content_type == "application/problem+json"
    assert response.headers["retry-after"] == "3"
    assert response.body is not None
    assert b'"code":"SETTLEMENT_IN_PROGRESS"' in response.body
    assert b'"challengeId":"c1"' in response.body
