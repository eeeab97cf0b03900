"""Security: path tricks must not reach routes (or upstream paths) they should not.

Requests are written byte for byte (``raw_request``): httpx would resolve
``..`` and re-encode before sending, hiding exactly what these tests need.
Every refusal is a 400 problem, decided before the route is chosen, and the
upstream never sees the request.
"""

from __future__ import annotations

import pytest

from tests.support.apps import raw_request
from tests.support.gateway import mint_token
from tests.support.seller import Seller
from x402srv.errors import InvalidRequest
from x402srv.server.paths import gateway_segments, is_guarded, path_forms


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("/api/../admin", id="dot-dot"),
        pytest.param("/api/./x", id="dot"),
        pytest.param("/api/%2e%2e/admin", id="encoded-dot-dot"),
        pytest.param("/api/%2E%2e/admin", id="encoded-dot-dot-mixed-case"),
        pytest.param("/api/.%2e/admin", id="half-encoded-dot-dot"),
        pytest.param("/api/%252e%252e/admin", id="double-encoded-dot-dot"),
        pytest.param("/api/%25252e%25252e/admin", id="triple-encoded-dot-dot"),
        pytest.param("/api/x%2Fy", id="encoded-slash"),
        pytest.param("/api/x%252Fy", id="double-encoded-slash"),
        pytest.param("/api/x%5cy", id="encoded-backslash"),
        pytest.param("/api/x\\..\\y", id="backslash"),
        pytest.param("/api//admin", id="double-slash"),
        pytest.param("/api/x%00y", id="encoded-nul"),
        pytest.param("/api/x%0d%0aSet-Cookie:%20a=1", id="encoded-crlf"),
        pytest.param("/api/%ff", id="not-utf8"),
    ],
)
async def test_ambiguous_paths_are_refused_with_400(gateway: Seller, target: str) -> None:
    token = await mint_token()
    response = await raw_request(
        gateway.server.url, target, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status == 400, response.body
    assert response.headers["content-type"] == "application/problem+json"
    assert b'"INVALID_REQUEST"' in response.body
    assert b'"method"' not in response.body  # not an echo from the upstream


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("/apix/data", id="prefix-confusion"),
        pytest.param("/api%2f..%2fadmin", id="encoded-slash-after-prefix"),
        pytest.param("/x/../api/x", id="dot-dot-into-prefix"),
    ],
)
async def test_paths_outside_every_prefix_are_404_and_never_forwarded(
    gateway: Seller, target: str
) -> None:
    """No route's raw prefix matches, so the gateway never sees them (and nothing is forwarded)."""
    token = await mint_token()
    response = await raw_request(
        gateway.server.url, target, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status == 404
    assert b'"NOT_FOUND"' in response.body


async def test_premium_cannot_be_reached_through_encoding_with_an_hourly_token(
    gateway: Seller,
) -> None:
    """``/api/%70remium`` is /api/premium once decoded: the daily-only route applies."""
    hourly = await mint_token("hourly")
    response = await raw_request(
        gateway.server.url, "/api/%70remium/report", headers={"Authorization": f"Bearer {hourly}"}
    )
    assert response.status == 401
    daily = await mint_token("daily")
    allowed = await raw_request(
        gateway.server.url, "/api/%70remium/report", headers={"Authorization": f"Bearer {daily}"}
    )
    assert allowed.status == 200
    assert b'"raw_path":"/api/%70remium/report"' in allowed.body


async def test_legitimate_escapes_pass(gateway: Seller) -> None:
    token = await mint_token()
    response = await raw_request(
        gateway.server.url,
        "/api/100%25/a%2541/..x/caf%C3%A9/",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status == 200, response.body
    assert b'"raw_path":"/api/100%25/a%2541/..x/caf%C3%A9/"' in response.body
    # the gateway's own HTTP client adds none of its defaults (bodies pass undecoded)
    assert b"accept-encoding" not in response.body.lower()
    assert b"python-httpx" not in response.body


# ---------------------------------------------------------------- the functions themselves


def test_gateway_segments_decode_once_and_keep_a_trailing_slash() -> None:
    assert gateway_segments("/api/caf%C3%A9/") == ["api", "café", ""]
    assert gateway_segments("/") == [""]
    with pytest.raises(InvalidRequest):
        gateway_segments("api/x")


@pytest.mark.parametrize(
    ("path", "guarded"),
    [
        ("/api", True),
        ("/api/x", True),
        ("/apix", False),
        ("/public/x", False),
        ("/public/../api/x", True),
        ("/public/%2e%2e/api/x", True),
        ("/api%2Fx", True),
        ("/%61pi/x", True),
        ("/%2561pi/x", True),
        ("/public\\..\\api", True),
    ],
)
def test_guards_fail_closed_on_every_reading(path: str, guarded: bool) -> None:
    assert is_guarded(path, ["/api"]) is guarded


def test_path_forms_are_bounded_for_deep_encodings() -> None:
    deep = "/" + "%25" * 50 + "41"
    assert len(path_forms(deep)) <= 10


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("/api/caf\xe9", id="raw-latin1-byte"),
        pytest.param("/api/\xff\xfe", id="raw-invalid-utf8"),
        pytest.param("/api/a b", id="raw-space"),
    ],
)
async def test_raw_bytes_in_the_path_are_client_errors_never_500(
    gateway: Seller, target: str
) -> None:
    token = await mint_token()
    response = await raw_request(
        gateway.server.url, target, headers={"Authorization": f"Bearer {token}"}
    )
    assert 400 <= response.status < 500, response.body
    assert b'"method"' not in response.body
