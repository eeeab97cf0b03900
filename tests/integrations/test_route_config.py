"""``[[routes]]`` validation, and the Sanic guard's fail-closed path matching."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sanic import Request, Sanic
from sanic.response import HTTPResponse
from sanic.response import json as json_response

from tests.support.credentials import make_config
from tests.support.gateway import AGENT_URL
from tests.support.seller import JWT_SECRET
from x402srv import guard
from x402srv.config.models import parse_config
from x402srv.errors import ConfigError
from x402srv.tokens.verify import HS256KeySource, TokenVerifier

SELLER = make_config(secret=JWT_SECRET).model_dump(mode="json", include={"seller", "plans"})


def config_with(routes: list[dict[str, Any]], **extra: Any) -> Any:
    document = {**SELLER, "credentials": {"secret": JWT_SECRET}, "routes": routes, **extra}
    return parse_config(document, env={"UPSTREAM_SECRET": "s3cret-value"})


def test_defaults_and_secret_references() -> None:
    config = config_with(
        [
            {
                "prefix": "/api",
                "upstream": "https://api.internal/v1/",
                "secret": {"env": "UPSTREAM_SECRET"},
            }
        ]
    )
    route = config.routes[0]
    assert route.upstream == "https://api.internal/v1"
    assert route.plans is None and route.strip_prefix is False
    assert route.secret.reveal() == "s3cret-value"
    assert "s3cret-value" not in repr(config)
    assert "s3cret-value" not in str(config.describe())


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ({"prefix": "api", "upstream": "http://u"}, "routes[0].prefix"),
        ({"prefix": "/api/", "upstream": "http://u"}, "routes[0].prefix"),
        ({"prefix": "/api/../x", "upstream": "http://u"}, "routes[0].prefix"),
        ({"prefix": "/a%2fb", "upstream": "http://u"}, "routes[0].prefix"),
        ({"prefix": "/api", "upstream": "ftp://u"}, "routes[0].upstream"),
        ({"prefix": "/api", "upstream": "http://u?x=1"}, "routes[0].upstream"),
        ({"prefix": "/api", "upstream": "http://user:pw@u"}, "routes[0].upstream"),
        ({"prefix": "/api", "upstream": "http://u", "plans": ["gold"]}, "routes[0].plans"),
        ({"prefix": "/api", "upstream": "http://u", "plans": []}, "routes[0].plans"),
        (
            {"prefix": "/api", "upstream": "http://u", "secret_header": "Bad Header"},
            "secret_header",
        ),
        ({"prefix": "/api", "upstream": "http://u", "read_timeout_seconds": 0}, "read_timeout"),
        ({"prefix": "/api", "upstream": "http://u", "typo": 1}, "routes[0].typo: unknown key"),
    ],
)
def test_bad_routes_name_their_key_path(route: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_with([route])


def test_duplicate_prefixes_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate route prefix"):
        config_with(
            [{"prefix": "/api", "upstream": "http://a"}, {"prefix": "/api", "upstream": "http://b"}]
        )


def test_gateway_needs_the_jwt_issuer() -> None:
    with pytest.raises(ConfigError, match=re.escape('credentials.issuer = "jwt"')):
        parse_config(
            {
                **SELLER,
                "credentials": {"issuer": "callback", "callback": "x:y"},
                "routes": [{"prefix": "/api", "upstream": "http://u"}],
            },
            env={},
        )


async def test_sanic_guard_prefix_cannot_be_reached_through_dot_segments() -> None:
    """Security: a catch-all route must not serve /api content for /public/%2e%2e/api."""
    app: Sanic[Any, Any] = Sanic("x402srv-guard-paths")
    app.config.TOUCHUP = False
    verifier = TokenVerifier(HS256KeySource(JWT_SECRET), issuer=AGENT_URL, audience=AGENT_URL)
    guard.access_guard(app, verifier, paths=["/api"])

    async def anything(request: Request, rest: str) -> HTTPResponse:
        return json_response({"served": rest})

    app.add_route(anything, "/<rest:path>")
    for path in ("/public/%2e%2e/api/data", "/%61pi/data", "/public/../api/data"):
        _, response = await app.asgi_client.get(path)
        assert response.status == 401, path
    _, public = await app.asgi_client.get("/public/data")
    assert public.status == 200
