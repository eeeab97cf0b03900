"""Gateway mode forwarding: a real x402srv in front of a real upstream process.

Tokens are minted with the gateway's own issuer key; buying them with the
official client is ``test_gateway_purchase.py``. Every assertion about what
was forwarded reads what the upstream itself says it received.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import httpx
import pytest

from tests.support.apps import AppProcess
from tests.support.credentials import bearer
from tests.support.gateway import UPSTREAM_SECRET, mint_token, received_headers
from tests.support.seller import Seller, decode_header


async def test_forwards_method_path_query_body_and_identity_headers(
    gateway: Seller, echo_upstream: AppProcess
) -> None:
    token = await mint_token("hourly")
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{gateway.server.url}/api/v1/caf%C3%A9/a%20b?x=%2F&y=1+2&y=3",
            content=b'{"city": "Berlin"}',
            headers={**bearer(token), "Content-Type": "application/json", "X-Custom": "kept"},
        )
    assert response.status_code == 200, response.text
    echo = response.json()
    assert echo["method"] == "POST"
    assert echo["raw_path"] == "/api/v1/caf%C3%A9/a%20b"  # byte for byte, not re-encoded
    assert echo["query"] == "x=%2F&y=1+2&y=3"
    assert echo["body"] == '{"city": "Berlin"}'
    headers = received_headers(echo)
    assert headers["x-x402-plan"] == ["hourly"]
    assert headers["x-x402-payer"] == ["0x" + "ab" * 20]
    assert len(headers["x-x402-request-id"]) == 1
    assert headers["x-x402-gateway-secret"] == [UPSTREAM_SECRET]
    assert headers["x-custom"] == ["kept"]
    assert headers["content-type"] == ["application/json"]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert headers["x-forwarded-proto"] == ["http"]
    assert "authorization" not in headers
    assert headers["host"] == [f"127.0.0.1:{echo_upstream.port}"]
    assert headers["x-forwarded-host"] == [gateway.server.url.removeprefix("http://")]


async def test_client_cannot_spoof_gateway_headers(gateway: Seller) -> None:
    """Security: a buyer with an hourly token must not pass as another plan or as the gateway."""
    token = await mint_token("hourly")
    spoofed = {
        "X-X402-Plan": "daily",
        "X-X402-Payer": "0x" + "00" * 20,
        "X-X402-Request-Id": "forged",
        "X-X402-Gateway-Secret": "guess",
        "X-Forwarded-For": "10.0.0.1",
        "Connection": "keep-alive, X-Drop-Me",
        "X-Drop-Me": "hop-by-hop by Connection",
        "Proxy-Authorization": "Basic abc",
    }
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{gateway.server.url}/api/echo", headers={**bearer(token), **spoofed}
        )
    assert response.status_code == 200, response.text
    headers = received_headers(response.json())
    assert headers["x-x402-plan"] == ["hourly"]
    assert headers["x-x402-payer"] == ["0x" + "ab" * 20]
    assert headers["x-x402-request-id"] != ["forged"]
    assert headers["x-x402-gateway-secret"] == [UPSTREAM_SECRET]
    assert headers["x-forwarded-for"] == ["127.0.0.1"]
    assert "x-drop-me" not in headers
    assert "proxy-authorization" not in headers


async def test_a_payer_claim_that_is_no_address_never_reaches_the_upstream(
    gateway: Seller,
) -> None:
    """A token issued before the payer came from the signature alone may carry whatever a
    facilitator answered: the upstream gets no X-X402-Payer rather than a formula."""
    token = await mint_token("hourly", payer='=HYPERLINK("https://evil.example","x")')
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{gateway.server.url}/api/echo", headers=bearer(token))
    assert response.status_code == 200, response.text
    headers = received_headers(response.json())
    assert "x-x402-payer" not in headers
    assert headers["x-x402-plan"] == ["hourly"]


async def test_response_status_headers_and_cookies_pass_back(gateway: Seller) -> None:
    token = await mint_token()
    async with httpx.AsyncClient() as http:
        response = await http.get(
            f"{gateway.server.url}/api/_status?code=418", headers=bearer(token)
        )
    assert response.status_code == 418
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert "keep-alive" not in response.headers
    assert "x-x402-plan" not in response.headers  # the X-X402 namespace is the gateway's


OTHER_PAYER = "0x" + "cd" * 20


async def test_an_upstreams_cookies_for_one_buyer_never_reach_it_with_another_buyers_call(
    gateway: Seller,
) -> None:
    """Security: the gateway's one upstream client must not keep the cookies it passes back.

    httpx's client keeps every ``Set-Cookie`` it reads in its jar and sends it with
    its later requests to that host: the session an upstream opened for one buyer
    went with every other buyer's calls (docs/gateway.md: what a call forwards).
    """
    async with httpx.AsyncClient() as first_buyer:
        first = await first_buyer.get(
            f"{gateway.server.url}/api/_status?code=200", headers=bearer(await mint_token())
        )
    assert first.headers.get_list("set-cookie") == ["a=1", "b=2"]  # the buyer's to keep
    async with httpx.AsyncClient() as other_buyer:  # (a jar of its own: nothing in it)
        token = await mint_token(payer=OTHER_PAYER)
        other = await other_buyer.get(f"{gateway.server.url}/api/echo", headers=bearer(token))
        own = await other_buyer.get(
            f"{gateway.server.url}/api/echo", headers={**bearer(token), "Cookie": "mine=1"}
        )
    assert other.status_code == 200, other.text
    assert received_headers(other.json()).get("cookie") is None  # not the first buyer's a=1; b=2
    assert received_headers(own.json())["cookie"] == ["mine=1"]  # a buyer's own cookies pass


async def test_strip_prefix_and_upstream_base_path(gateway: Seller) -> None:
    token = await mint_token()
    async with httpx.AsyncClient() as http:
        deep = await http.get(f"{gateway.server.url}/strip/a/b?q=1", headers=bearer(token))
        root = await http.get(f"{gateway.server.url}/strip", headers=bearer(token))
    assert deep.json()["raw_path"] == "/base/a/b"
    assert deep.json()["query"] == "q=1"
    assert root.json()["raw_path"] == "/base"


async def test_head_and_delete_are_forwarded(gateway: Seller) -> None:
    token = await mint_token()
    async with httpx.AsyncClient() as http:
        head = await http.head(f"{gateway.server.url}/api/thing", headers=bearer(token))
        delete = await http.delete(f"{gateway.server.url}/api/thing", headers=bearer(token))
    assert head.status_code == 200
    assert head.content == b""
    assert delete.json()["method"] == "DELETE"


async def test_large_bodies_stream_both_ways_intact(gateway: Seller) -> None:
    token = await mint_token()
    body = bytes(range(256)) * (5 * 4096)  # 5 MiB
    async with httpx.AsyncClient(timeout=60) as http:
        up = await http.put(f"{gateway.server.url}/api/blob", content=body, headers=bearer(token))
        down = await http.get(
            f"{gateway.server.url}/api/_big?bytes={7 * 1024 * 1024 + 3}", headers=bearer(token)
        )
    assert up.json()["body_length"] == len(body)
    assert up.json()["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert len(down.content) == 7 * 1024 * 1024 + 3


async def test_response_body_is_streamed_not_buffered(
    gateway: Seller, echo_upstream: AppProcess
) -> None:
    """The first chunk reaches the client while the upstream still holds back the second."""
    token = await mint_token()
    async with (
        httpx.AsyncClient(timeout=30) as http,
        http.stream("GET", f"{gateway.server.url}/api/_drip", headers=bearer(token)) as response,
    ):
        chunks = response.aiter_raw()
        first = await asyncio.wait_for(anext(chunks), 10)  # would hang if the gateway buffered
        assert first == b"first;"
        await http.post(f"{echo_upstream.url}/_control/release")
        rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"second"


async def test_request_body_is_streamed_not_buffered(
    gateway: Seller, echo_upstream: AppProcess
) -> None:
    """The upstream sees the first chunk before the client has sent the second."""
    token = await mint_token()
    first_arrived = asyncio.Event()

    async def body() -> Any:
        yield b"x" * 1000
        deadline = time.monotonic() + 10
        async with httpx.AsyncClient() as probe:
            while time.monotonic() < deadline:
                seen = (await probe.get(f"{echo_upstream.url}/_control/received")).json()["chunks"]
                if seen:
                    first_arrived.set()
                    break
                await asyncio.sleep(0.05)
        yield b"y" * 1000

    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{gateway.server.url}/api/_upload", content=body(), headers=bearer(token)
        )
    assert first_arrived.is_set(), "the gateway held the request body back"
    assert response.json()["sha256"] == hashlib.sha256(b"x" * 1000 + b"y" * 1000).hexdigest()


async def test_upstream_down_is_502_problem(gateway: Seller) -> None:
    token = await mint_token()
    response = httpx.get(f"{gateway.server.url}/down/x", headers=bearer(token))
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "UPSTREAM_UNAVAILABLE"
    assert "127.0.0.1" not in response.text  # the upstream's address is not the client's business


async def test_upstream_too_slow_is_504_problem(gateway: Seller) -> None:
    token = await mint_token()
    started = time.monotonic()
    response = httpx.get(
        f"{gateway.server.url}/slow/_slow?seconds=5", headers=bearer(token), timeout=10
    )
    assert response.status_code == 504
    assert response.json()["code"] == "UPSTREAM_TIMEOUT"
    assert time.monotonic() - started < 4  # the route's 0.5 s read timeout, not the upstream's 5


async def test_upstream_dying_mid_answer_truncates_the_response(gateway: Seller) -> None:
    token = await mint_token()
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.get(f"{gateway.server.url}/api/_broken", headers=bearer(token), timeout=10)


async def test_body_over_the_route_limit_is_refused(gateway: Seller) -> None:
    token = await mint_token()
    response = httpx.post(
        f"{gateway.server.url}/small/x", content=b"z" * 1001, headers=bearer(token)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_REQUEST"

    async def chunked() -> Any:
        for _ in range(3):
            yield b"z" * 600

    async with httpx.AsyncClient() as http:
        streamed = await http.post(
            f"{gateway.server.url}/small/x", content=chunked(), headers=bearer(token)
        )
    assert streamed.status_code == 400
    within = httpx.post(f"{gateway.server.url}/small/x", content=b"z" * 1000, headers=bearer(token))
    assert within.json()["body_length"] == 1000


async def test_x402srv_own_routes_are_not_forwarded(gateway: Seller) -> None:
    card = httpx.get(f"{gateway.server.url}/.well-known/agent-card.json")
    assert card.status_code == 200
    assert card.json()["supportedInterfaces"][0]["url"].endswith("/x402/access")
    discovery = httpx.post(gateway.access_url, json={})
    assert discovery.status_code == 402


# ---------------------------------------------------------------- refusals


async def test_no_token_gets_the_routes_402_offer(gateway: Seller) -> None:
    response = httpx.get(f"{gateway.server.url}/api/premium/report?x=1")
    assert response.status_code == 402
    assert response.headers["cache-control"] == "no-store"
    required = decode_header(response.headers["payment-required"])
    assert required["x402Version"] == 2
    assert [a["extra"]["planId"] for a in required["accepts"]] == ["daily"]
    assert required["resource"]["url"] == "http://127.0.0.1/api/premium/report"
    assert response.json()["accepts"] == required["accepts"]
    everything = decode_header(httpx.get(f"{gateway.server.url}/api/x").headers["payment-required"])
    assert [a["extra"]["planId"] for a in everything["accepts"]] == ["hourly", "daily"]


@pytest.mark.parametrize(
    ("authorization", "code"),
    [
        ("Bearer not-a-jwt", "INVALID_TOKEN"),
        ("Basic dXNlcjpwYXNz", "INVALID_TOKEN"),
    ],
)
async def test_bad_token_is_401_like_every_guard(
    gateway: Seller, authorization: str, code: str
) -> None:
    response = httpx.get(f"{gateway.server.url}/api/x", headers={"Authorization": authorization})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    assert response.json()["code"] == code


async def test_expired_and_foreign_tokens_are_401(gateway: Seller) -> None:
    expired = await mint_token(ttl=1, issued_ago=1.1)  # (expired 0.1 s ago)
    foreign = await mint_token(secret="another-seller-secret-" + "q" * 32)
    answer = httpx.get(f"{gateway.server.url}/api/x", headers=bearer(expired))
    assert answer.status_code == 401
    assert answer.json()["code"] == "TOKEN_EXPIRED"
    other = httpx.get(f"{gateway.server.url}/api/x", headers=bearer(foreign))
    assert other.status_code == 401
    assert other.json()["code"] == "INVALID_TOKEN"


async def test_token_of_a_plan_the_route_does_not_accept_is_401(gateway: Seller) -> None:
    """Security: /api/premium is daily-only even though /api (hourly) is its parent prefix."""
    hourly = await mint_token("hourly")
    daily = await mint_token("daily")
    refused = httpx.get(f"{gateway.server.url}/api/premium/report", headers=bearer(hourly))
    assert refused.status_code == 401
    assert "daily" in refused.json()["detail"]
    allowed = httpx.get(f"{gateway.server.url}/api/premium/report", headers=bearer(daily))
    assert allowed.status_code == 200
    assert received_headers(allowed.json())["x-x402-plan"] == ["daily"]
