"""Buyers who leave mid-stream give the gateway's upstream connections back.

Real processes: x402srv's gateway (sqlite) and the docs' streaming "LLM"
(``docs/samples/llm_stream_upstream.py``, under uvicorn, used by nothing else
here). Buyers on real sockets start slow streams, on a route charged by use
and on one sold by time, and all close their sockets at once in the middle,
the way ``wrk`` ends a run (some with a plain close, some with a reset).

Sanic cancels a handler whose client went away; when the handler was already
in its cleanup (the client's socket closing, the upstream's response being
closed), that cancellation landed inside ``Response.aclose()`` and the pooled
connection stayed checked out for good (the bench's 504 after a wrk run, once
enough had leaked: httpx holds at most 100). What is checked here is what the
machine shows: no socket of the gateway's to the upstream stays open once the
buyers left, and the next calls, as many at once as the pool holds, all answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess, held_mid_answer, leave_at_once, open_sockets_to
from tests.support.credentials import bearer
from tests.support.faults import leaving_at_the_end, leaving_on_connect
from tests.support.metering import limits
from tests.support.paths import SAMPLES
from tests.support.seller import Seller
from x402srv.testing.buyers import paying_client
from x402srv.testing.launcher import FRESH_ENV

LEAVING = 50  # buyers who leave at once (wrk's -c50)
POOL = 100  # httpx's default max_connections: the gateway's client keeps it
PLANS = [
    {"plan_id": "tokens", "unit_amount": "$1.00", "description": "Tokens", "calls": 10**9},
    {"plan_id": "hour", "unit_amount": "$0.01", "description": "An hour, unmetered"},
]


def _routes(upstream: str, checked: str | None = None) -> list[dict[str, Any]]:
    """``/metered`` (by use) and ``/plain`` (an hour) to ``upstream``; ``/check`` to ``checked``."""
    timeouts = {"connect_timeout_seconds": 2}  # a pool that never frees a place: 504 in 2 s
    routes: list[dict[str, Any]] = [
        {
            "prefix": "/metered",
            "upstream": upstream,
            "plans": ["tokens"],
            "strip_prefix": True,
            "cost": {"reserve": 2000, "from": "sse"},
            **timeouts,
        },
        {
            "prefix": "/plain",
            "upstream": upstream,
            "plans": ["hour"],
            "strip_prefix": True,
            **timeouts,
        },
    ]
    if checked is not None:
        routes.append(
            {
                "prefix": "/check",
                "upstream": checked,
                "plans": ["hour"],
                "strip_prefix": True,
                **timeouts,
            }
        )
    return routes


@pytest.fixture
def other_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppProcess]:
    """A second LLM upstream, left alone by the injected faults; and fresh interpreters.

    The faults are injected by a ``sitecustomize`` that only a fresh interpreter reads.
    """
    monkeypatch.setenv(FRESH_ENV, "1")
    other = AppProcess(
        "llm_stream_upstream:app", tmp_path / "llm.log", health="/health", app_dir=SAMPLES
    ).start()
    try:
        yield other
    finally:
        other.stop()


@pytest.fixture(scope="module")
def leaving_gateway(start_seller: Callable[..., Seller], llm_upstream: AppProcess) -> Seller:
    return start_seller("gas-wallet", plans=PLANS, routes=_routes(llm_upstream.url))


async def _post(
    url: str, path: str, token: str, body: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw POST of ``body`` to the gateway: its socket, the request sent."""
    host, _, port = url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    return reader, writer


async def _pool_answers_all(url: str, token: str) -> None:
    """As many calls at once as the pool holds, each holding its place 2 s: every one answers."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=POOL)) as client:
        answers = await asyncio.gather(*(_whole_stream(client, url, token) for _ in range(POOL)))
    statuses = sorted({status for status, _ in answers})
    assert statuses == [200], f"{statuses}: {[a for s, a in answers if s != 200][:1]!r}"
    assert all(b"event: usage" in text for _, text in answers)
    assert time.monotonic() - started < 15


async def _crowds_leave_then_the_pool_answers(
    gateway: Seller, buyer: LocalAccount, leave: Callable[[str, str, str], Awaitable[None]]
) -> None:
    """120 buyers, 20 at a time, on the metered and the plain route in turn, each leaving as
    ``leave`` does; then the pool, checked through the ``/check`` route, answers them all."""
    url = gateway.server.url
    tokens = {plan_id: await _buy(gateway, buyer, plan_id) for plan_id in ("tokens", "hour")}
    for path, plan_id in [("/metered", "tokens"), ("/plain", "hour")] * 3:
        await asyncio.gather(
            *(leave(url, f"{path}/v1/complete", tokens[plan_id]) for _ in range(20))
        )
    await _pool_answers_all(f"{url}/check/v1/complete", tokens["hour"])


async def _start_stream(url: str, path: str, token: str) -> asyncio.StreamWriter:
    """A raw POST of a slow completion, read up to its first token; its socket, still open."""
    reader, writer = await _post(url, path, token, {"max_tokens": 2000, "delay": 0.002})
    return await held_mid_answer(reader, writer, b"event: token", f"{path}, first token")


async def _leave_mid_stream(url: str, path: str, token: str) -> None:
    """``LEAVING`` buyers in the middle of their streams, then all gone at once."""
    await leave_at_once(
        await asyncio.gather(*(_start_stream(url, path, token) for _ in range(LEAVING)))
    )


async def _buy(gateway: Seller, buyer: LocalAccount, plan_id: str) -> str:
    http, _ = paying_client(buyer)
    async with http:
        bought = await http.post(gateway.access_url, json={"planId": plan_id})
    assert bought.status_code == 200, bought.text
    token: str = bought.json()["accessToken"]
    return token


async def _whole_stream(client: httpx.AsyncClient, url: str, token: str) -> tuple[int, bytes]:
    body: dict[str, Any] = {"max_tokens": 40, "delay": 0.05}  # 2 s: every call holds its slot
    async with client.stream("POST", url, json=body, headers=bearer(token)) as answer:
        return answer.status_code, b"".join([chunk async for chunk in answer.aiter_bytes()])


@pytest.mark.parametrize(("path", "plan_id"), [("/metered", "tokens"), ("/plain", "hour")])
async def test_buyers_leaving_mid_stream_leave_no_upstream_connection_checked_out(
    leaving_gateway: Seller,
    llm_upstream: AppProcess,
    buyer: LocalAccount,
    path: str,
    plan_id: str,
) -> None:
    token = await _buy(leaving_gateway, buyer, plan_id)
    url = leaving_gateway.server.url
    for _ in range(3):  # wrk's runs, one after another
        await _leave_mid_stream(url, f"{path}/v1/complete", token)
    deadline = time.monotonic() + 5
    while (still := open_sockets_to(llm_upstream.port)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert still == 0, f"{still} upstream connections still held after the buyers left"
    await _pool_answers_all(f"{url}{path}/v1/complete", token)


async def _leave_as_it_ends(url: str, path: str, token: str) -> None:
    """A fast completion whose buyer reads up to the upstream's usage event, then is gone."""
    reader, writer = await _post(url, path, token, {"max_tokens": 64})
    try:
        status = await asyncio.wait_for(reader.readline(), 10)
        assert status.startswith(b"HTTP/1.1 200"), f"{path}: {status!r}, {await reader.read(500)!r}"
        seen = b""
        while b"event: usage" not in seen:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, f"{path}: the gateway closed before the usage event: {seen!r}"
            seen += chunk
    finally:
        writer.transport.abort()


async def test_buyers_leaving_as_the_answer_ends_leave_no_upstream_connection_checked_out(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    buyer: LocalAccount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each buyer leaves as the upstream's last chunk passes; the pool keeps its connections.

    The gateway read the upstream's answer with httpx's ``aiter_raw``, which closes
    the answer itself in the handler's task once the body is over. A buyer's
    cancellation that landed inside that close left the connection checked out
    for good, one per such buyer (``wrk`` ending its runs lost about one in a
    hundred), until the pool's 100 were gone and every call was a 504. The
    cancellation is injected at that instant for each answer of the upstream at
    127.0.0.1 (``leaving_at_the_end``); the calls that check the pool afterwards
    reach the same upstream as ``localhost``, which the injection leaves alone.
    """
    monkeypatch.setenv(FRESH_ENV, "1")  # (a fresh interpreter reads the sitecustomize)
    checked = llm_upstream.url.replace("127.0.0.1", "localhost")
    assert checked != llm_upstream.url
    gateway = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=_routes(llm_upstream.url, checked),
        env=leaving_at_the_end(llm_upstream.url),
    )
    await _crowds_leave_then_the_pool_answers(gateway, buyer, _leave_as_it_ends)


async def _leave_as_it_connects(url: str, path: str, token: str) -> None:
    """A call whose buyer is gone once the gateway's upstream connection opens (injected)."""
    reader, writer = await _post(url, path, token, {"max_tokens": 64})
    seen = b""
    try:
        # (The injected cancellation, with the buyer's socket still open, is answered
        # 500 by Sanic; a real buyer is gone by then. A pool without a free place
        # answers 504.)
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            seen += chunk
            assert not seen.startswith(b"HTTP/1.1 504"), f"{path}: {seen[:200]!r}"
            if seen.startswith(b"HTTP/1.1 500") and seen.endswith(b"}"):
                break  # (the whole 500: its problem document ends the answer)
    except ConnectionError:
        pass
    finally:
        writer.transport.abort()


async def test_buyers_leaving_as_the_upstream_connection_opens_leave_no_connection_behind(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    other_upstream: AppProcess,
    buyer: LocalAccount,
) -> None:
    """Each buyer is gone as the gateway's new connection to the upstream opens.

    httpx's own pool (httpcore 1.0) kept a connection whose call was cancelled
    between its connect and its first byte, for good: neither idle nor closed nor
    expired, it held one of the pool's 100 places. ``wrk`` cutting 50 calls at
    once took half the pool, and a few runs made every call a 504. The gateway's
    pool (``x402srv.gateway.upstreams``) closes a connection whose call did not
    end cleanly. The cancellation is injected as each connection to the upstream
    opens (``leaving_on_connect``); the pool is then checked through another
    upstream, whose connections the injection leaves alone.
    """
    gateway = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=_routes(llm_upstream.url, other_upstream.url),
        env=leaving_on_connect(llm_upstream.port),
    )
    await _crowds_leave_then_the_pool_answers(gateway, buyer, _leave_as_it_connects)


async def test_a_buyer_who_leaves_before_its_call_is_sent_to_the_upstream_is_charged_nothing(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    other_upstream: AppProcess,
    buyer: LocalAccount,
) -> None:
    """Gone as the gateway's connection to the upstream opens: the upstream saw nothing.

    Its call, charged by use, was settled as abandoned: the whole reservation
    (2000 credits) kept, as if the upstream had produced an answer and reported
    nothing; a call on a route of a fixed cost (5) kept it too. Now a call whose
    first byte never went out costs nothing. The cancellation is injected as each
    connection to the upstream opens (``leaving_on_connect``); the balance is read
    through a route to another upstream, which the injection leaves alone.
    """
    balance = {
        "prefix": "/balance",
        "upstream": other_upstream.url,
        "plans": ["tokens"],
        "strip_prefix": True,
        "cost": 1,
    }
    per_call = {**balance, "prefix": "/per-call", "upstream": llm_upstream.url, "cost": 5}
    gateway = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=[*_routes(llm_upstream.url), balance, per_call],
        env=leaving_on_connect(llm_upstream.port),
    )
    url = gateway.server.url
    token = await _buy(gateway, buyer, "tokens")
    await asyncio.gather(
        *(
            _leave_as_it_connects(url, f"{path}/v1/complete", token)
            for path in ("/metered", "/per-call")
            for _ in range(5)
        )
    )
    async with httpx.AsyncClient(timeout=30) as client:
        after = await client.post(
            f"{url}/balance/v1/complete", json={"max_tokens": 1}, headers=bearer(token)
        )
    assert after.status_code == 200, after.text
    assert limits(after.headers["ratelimit"])["credits"]["r"] == 10**9 - 1  # only its own 1
