"""``GET /`` answers an index, not a bare 404 (issue 30, item 5): what a seller opening the
server's URL sees. JSON for a program, HTML for a browser; the console is named only when it
is on this listener; a gateway route at ``/`` keeps the path."""

from __future__ import annotations

from typing import Any

from tests.support.configs import AGENT_URL, config_dict, make_config
from x402srv.server.app import create_app

ADMIN_TOKEN = "admin-token-for-the-index-test-" + "a" * 8


def _app(name: str, **sections: Any) -> Any:
    document = config_dict(store={"backend": "memory"}, reconciler={"enabled": False}, **sections)
    return create_app(make_config(document), name=name)


async def test_the_root_points_at_the_card_the_access_endpoint_and_the_plans() -> None:
    app = _app("index_json")
    _, response = await app.asgi_client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json
    assert body["agentCard"] == f"{AGENT_URL}/.well-known/agent-card.json"
    assert body["access"] == f"{AGENT_URL}/x402/access"
    assert body["a2a"] == f"{AGENT_URL}/a2a"
    assert [p["planId"] for p in body["plans"]] == ["hourly", "daily"]
    assert body["plans"][0]["price"] == "$0.10"
    assert "console" not in body


async def test_a_browser_gets_a_page_naming_the_console_on_this_listener() -> None:
    app = _app("index_html", admin={"token": ADMIN_TOKEN})
    _, response = await app.asgi_client.get(
        "/", headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["vary"] == "Accept"
    assert f'<a href="{AGENT_URL}/.well-known/agent-card.json">' in response.text
    assert f'<a href="{AGENT_URL}/admin/">' in response.text
    assert ADMIN_TOKEN not in response.text


async def test_a_console_on_its_own_listener_is_not_named_on_the_public_page() -> None:
    app = _app("index_private_console", admin={"token": ADMIN_TOKEN, "port": 8403})
    _, response = await app.asgi_client.get("/")
    assert "console" not in response.json


async def test_a_gateway_route_at_the_root_keeps_it() -> None:
    app = _app(
        "index_gateway",
        routes=[{"prefix": "/", "upstream": "http://127.0.0.1:9", "plans": ["hourly"]}],
    )
    _, response = await app.asgi_client.get("/")
    assert response.status_code == 402  # the gateway asks for a payment, as it does for any path
