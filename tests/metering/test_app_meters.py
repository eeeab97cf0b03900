"""Metering inside the seller's own app: the ASGI middleware, the Sanic guard, and any code.

Each meters with a ``Meter`` on a real sqlite store, the file x402srv credits
(here credited by hand exactly as x402srv's delivery does: ``credit`` keyed by
the purchase's challenge), with tokens the real ``jwt`` issuer signs. Refusals
are problem documents (402 ``CREDITS_EXHAUSTED`` with the request that tops the
grant up, 429 with ``Retry-After``), every metered answer carries the RateLimit
fields, and an answer of 5xx (or a handler that raised) gives the credits back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sanic import Request as SanicRequest
from sanic import Sanic
from sanic.response import HTTPResponse
from sanic.response import json as sanic_json
from starlette.testclient import TestClient
from starlette.types import Scope

from tests.support.configs import config_dict, make_config
from tests.support.gateway import AGENT_URL
from tests.support.metering import limits, minted
from tests.support.seller import JWT_SECRET
from x402srv.asgi import USAGE_KEY, AccessMiddleware
from x402srv.config.models import Config
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.errors import ConfigError, CreditsExhausted
from x402srv.guard import access_guard, require_access
from x402srv.tokens.verify import HS256KeySource, TokenVerifier
from x402srv.usage.credits import Meter, Usage

LLM = {"plan_id": "llm", "unit_amount": "$1", "description": "Completions", "calls": 5}
RATED = {"plan_id": "rated", "unit_amount": "$1", "description": "An hour", "rate_limit": "2/day"}
WEEK = 604_800


def _config(tmp_path: Path, backend: str = "sqlite") -> Config:
    store = {"backend": backend}
    if backend == "sqlite":
        store["path"] = str(tmp_path / "x402srv.db")
    document = config_dict(store=store)
    document["seller"]["agent_url"] = AGENT_URL
    document["credentials"] = {"secret": JWT_SECRET}
    document["plans"] += [LLM, RATED]
    return make_config(document)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "x402srv.db")
    await opened.start()
    yield opened
    await opened.close()


def _verifier() -> TokenVerifier:
    return TokenVerifier(HS256KeySource(JWT_SECRET), issuer=AGENT_URL, audience=AGENT_URL)


async def _bought(store: SqliteStore, plan_id: str = "llm", calls: int = 5) -> tuple[str, str]:
    """A token and its grant holding ``calls`` credits, as a purchase through x402srv leaves it."""
    token, claims = await minted(plan_id, ttl=WEEK)
    if calls:
        await store.credit(
            claims.challenge_id,
            calls,
            key=claims.challenge_id,
            now=claims.issued_at,
            keep_until=claims.expires_at + 86_400,
        )
    return token, claims.challenge_id


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _left(headers: Any, policy: str = "credits") -> int:
    return limits(headers["ratelimit"])[policy]["r"]


# ------------------------------------------------------------ ASGI (FastAPI)


def _fastapi(meter: Meter) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/complete")
    async def complete(request: Request) -> dict[str, Any]:
        usage: Usage = request.state.x402_usage
        return {"text": "ok", "left": usage.balance}

    @app.get("/v1/batch")
    async def batch() -> dict[str, str]:
        return {"text": "many"}

    @app.get("/v1/overloaded")
    async def overloaded() -> JSONResponse:
        return JSONResponse({"error": "busy"}, status_code=503)

    @app.get("/v1/crash")
    async def crash() -> None:
        raise RuntimeError("the model fell over")

    def cost(scope: Scope) -> int:
        return 3 if scope["path"] == "/v1/batch" else 1

    app.add_middleware(
        AccessMiddleware, verifier=_verifier(), paths=["/v1"], meter=meter, cost=cost
    )
    return app


async def test_the_asgi_middleware_meters_every_guarded_call(
    store: SqliteStore, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    meter = Meter(store, config.plan_map, access_url=config.access_url)
    token, grant = await _bought(store)
    client = TestClient(_fastapi(meter), raise_server_exceptions=False)
    first = client.get("/v1/complete", headers=_auth(token))
    assert first.status_code == 200
    assert first.json() == {"text": "ok", "left": 4}
    assert _left(first.headers) == 4
    assert first.headers["ratelimit-policy"] == f'"credits";q=5;w={WEEK}'
    assert _left(client.get("/v1/batch", headers=_auth(token)).headers) == 1
    overloaded = client.get("/v1/overloaded", headers=_auth(token))
    assert (overloaded.status_code, _left(overloaded.headers)) == (503, 1)  # given back
    crashed = client.get("/v1/crash", headers=_auth(token))
    assert crashed.status_code == 500
    account = await store.get_credits(grant)
    assert account is not None
    assert (account.balance, account.spent, account.refunded, account.calls) == (1, 6, 2, 4)

    refused = client.get("/v1/batch", headers=_auth(token))  # costs 3, 1 left
    assert refused.status_code == 402
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert (problem["code"], problem["balance"], problem["cost"]) == ("CREDITS_EXHAUSTED", 1, 3)
    assert problem["topUp"] == {
        "url": config.access_url,
        "body": {"planId": "llm", "topUp": problem["topUp"]["body"]["topUp"]},
    }
    assert _left(refused.headers) == 1
    unmetered, _ = await minted("hourly")  # a plan sold by time, no rate limit: not metered
    plain = client.get("/v1/batch", headers=_auth(unmetered))
    assert plain.status_code == 200
    assert "ratelimit" not in plain.headers


async def test_a_rate_limit_in_the_asgi_middleware_answers_429(
    store: SqliteStore, tmp_path: Path
) -> None:
    meter = Meter(store, _config(tmp_path).plan_map)
    token, _ = await _bought(store, "rated", calls=0)
    client = TestClient(_fastapi(meter))
    answers = [client.get("/v1/batch", headers=_auth(token)) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert [_left(a.headers, "rate") for a in answers] == [1, 0, 0]
    assert int(answers[2].headers["retry-after"]) >= 1
    assert answers[2].json()["code"] == "RATE_LIMITED"
    assert "credits" not in limits(answers[0].headers["ratelimit"])
    assert USAGE_KEY == "x402_usage"


# ------------------------------------------------------------ Sanic guard


def _sanic(meter: Meter, style: str) -> Sanic[Any, Any]:
    app: Sanic[Any, Any] = Sanic(f"x402srv-metered-{style}")
    app.config.TOUCHUP = False

    async def complete(request: SanicRequest) -> HTTPResponse:
        return sanic_json({"left": request.ctx.x402_usage.balance})

    async def failing(request: SanicRequest) -> HTTPResponse:
        return sanic_json({"error": "busy"}, status=502)

    if style == "decorator":
        app.add_route(require_access(_verifier(), meter=meter)(complete), "/v1/complete")
        app.add_route(require_access(_verifier(), meter=meter, cost=2)(failing), "/v1/failing")
    else:
        access_guard(
            app,
            _verifier(),
            paths=["/v1"],
            meter=meter,
            cost=lambda request: 2 if request.path == "/v1/failing" else 1,
        )
        app.add_route(complete, "/v1/complete")
        app.add_route(failing, "/v1/failing")
    return app


@pytest.mark.parametrize("style", ["decorator", "middleware"])
async def test_the_sanic_guard_meters_when_given_a_meter(
    store: SqliteStore, tmp_path: Path, style: str
) -> None:
    meter = Meter(store, _config(tmp_path).plan_map)
    app = _sanic(meter, style)
    token, grant = await _bought(store, calls=2)
    _, first = await app.asgi_client.get("/v1/complete", headers=_auth(token))
    assert (first.status, first.json, _left(first.headers)) == (200, {"left": 1}, 1)
    _, failing = await app.asgi_client.get("/v1/failing", headers=_auth(token))
    assert failing.status == 402  # costs 2, 1 left: refused before the handler
    _, second = await app.asgi_client.get("/v1/complete", headers=_auth(token))
    assert (second.status, _left(second.headers)) == (200, 0)
    await store.credit(grant, 2, key="top-up", now=0, keep_until=10**10)
    _, failed = await app.asgi_client.get("/v1/failing", headers=_auth(token))
    assert (failed.status, _left(failed.headers)) == (502, 2)  # given back
    account = await store.get_credits(grant)
    assert account is not None
    assert (account.balance, account.refunded) == (2, 2)  # the 502 gave its 2 back
    _, refused = await app.asgi_client.get("/v1/complete", headers={})
    assert refused.status == 401


# ------------------------------------------------------------ any code


def test_the_framework_free_meter_works_without_an_event_loop(tmp_path: Path) -> None:
    """``Meter.from_config`` + ``spend_sync``: what a Flask or Django view calls."""
    config = _config(tmp_path)
    token, grant = asyncio.run(_sync_setup(tmp_path))
    verifier = TokenVerifier.from_config(config)
    with Meter.from_config(config) as meter:
        claims = verifier.verify_sync(token)
        usages = [meter.spend_sync(claims, 1) for _ in range(3)]
        assert [u.balance for u in usages if u is not None] == [2, 1, 0]
        last = usages[-1]
        assert last is not None
        meter.refund_sync(last)  # the call failed on the seller's side: 1 back
        assert meter.spend_sync(claims, 1) is not None
        with pytest.raises(CreditsExhausted) as refused:
            meter.spend_sync(claims, 1)
        assert refused.value.to_problem()["balance"] == 0
        assert meter.spend_sync(verifier.verify_sync(asyncio.run(minted("hourly"))[0])) is None
    account = asyncio.run(_read(tmp_path, grant))
    assert (account[0], account[1]) == (0, 1)


async def _sync_setup(tmp_path: Path) -> tuple[str, str]:
    store = SqliteStore(tmp_path / "x402srv.db")
    await store.start()
    try:
        return await _bought(store, calls=3)
    finally:
        await store.close()


async def _read(tmp_path: Path, grant: str) -> tuple[int, int]:
    store = SqliteStore(tmp_path / "x402srv.db")
    await store.start()
    try:
        account = await store.get_credits(grant)
        assert account is not None
        return account.balance, account.refunded
    finally:
        await store.close()


def test_a_meter_refuses_a_store_that_cannot_share_credits(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="memory store lives inside x402srv") as caught:
        Meter.from_config(_config(tmp_path, backend="memory"))
    assert caught.value.path == "store.backend"
