"""The gateway's upstream connections (``x402srv.gateway.upstreams``), against a real upstream.

The upstream is the docs' streaming "LLM" under uvicorn; the client is httpx
with the gateway's transport, as the gateway builds it. What is checked is what
a seller sees: connections kept and reused whatever the concurrency (httpx's
own pool opened one per call past 20 at once), a bounded wait for a free place,
and no place lost to a call that ended badly.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tests.support.apps import AppProcess
from x402srv.gateway.upstreams import UpstreamTransport

TOKENS = {"max_tokens": 16}


def _client(transport: UpstreamTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport, trust_env=False, timeout=10)


async def _open(client: httpx.AsyncClient, url: str, **body: object) -> httpx.Response:
    """A completion's answer, its body still to read."""
    request = client.build_request("POST", f"{url}/v1/complete", json={**TOKENS, **body})
    return await client.send(request, stream=True)


async def _complete(client: httpx.AsyncClient, url: str, **body: object) -> bytes:
    answer = await _open(client, url, **body)
    try:
        return b"".join([chunk async for chunk in answer.aiter_raw()])
    finally:
        await answer.aclose()


async def test_calls_in_a_row_reuse_one_connection(llm_upstream: AppProcess) -> None:
    transport = UpstreamTransport()
    async with _client(transport) as client:
        for _ in range(20):
            assert b"event: usage" in await _complete(client, llm_upstream.url)
    assert transport.opened == 1
    assert transport.busy == 0


async def test_fifty_calls_at_once_keep_their_connections_for_the_next_fifty(
    llm_upstream: AppProcess,
) -> None:
    """httpx's pool closed each connection coming back past 20 open: one connect per call."""
    transport = UpstreamTransport()
    async with _client(transport) as client:
        for _ in range(4):
            answers = await asyncio.gather(
                *(_complete(client, llm_upstream.url, delay=0.001) for _ in range(50))
            )
            assert all(b"event: usage" in answer for answer in answers)
        assert transport.opened <= 50
        assert transport.idle == transport.opened
    assert transport.busy == 0


async def test_a_call_waits_for_a_free_place_at_most_its_pool_timeout(
    llm_upstream: AppProcess,
) -> None:
    transport = UpstreamTransport(max_connections=2)
    async with _client(transport) as client:
        slow = [await _open(client, llm_upstream.url, max_tokens=50, delay=0.1) for _ in range(2)]
        started = time.monotonic()
        with pytest.raises(httpx.PoolTimeout):
            await client.post(
                f"{llm_upstream.url}/v1/complete",
                json=TOKENS,
                timeout=httpx.Timeout(10, pool=0.3),
            )
        assert 0.25 < time.monotonic() - started < 3
        await slow[0].aclose()  # a place is free again: the next call gets it
        assert b"event: usage" in await _complete(client, llm_upstream.url)
        await slow[1].aclose()
    assert transport.busy == 0


async def test_an_answer_closed_before_its_end_closes_its_connection(
    llm_upstream: AppProcess,
) -> None:
    transport = UpstreamTransport()
    async with _client(transport) as client:
        answer = await _open(client, llm_upstream.url, max_tokens=500, delay=0.01)
        async for _ in answer.aiter_raw():
            break
        await answer.aclose()  # the rest of the answer is unread: not reusable
        assert transport.idle == 0
        assert b"event: usage" in await _complete(client, llm_upstream.url)
        assert transport.opened == 2
    assert transport.busy == 0


async def test_a_call_cancelled_mid_answer_gives_its_place_back(llm_upstream: AppProcess) -> None:
    transport = UpstreamTransport(max_connections=1)
    async with _client(transport) as client:

        async def reading() -> None:
            await _complete(client, llm_upstream.url, max_tokens=500, delay=0.01)

        task = asyncio.create_task(reading())
        while transport.busy == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert transport.busy == 0
        # The one place is free: the next call does not wait for the pool.
        answer = await client.post(
            f"{llm_upstream.url}/v1/complete", json=TOKENS, timeout=httpx.Timeout(10, pool=1)
        )
        assert answer.status_code == 200
    assert transport.busy == 0


async def test_a_connection_idle_past_its_keepalive_is_not_reused(
    llm_upstream: AppProcess,
) -> None:
    # The third call reuses the second's connection only if it comes within the keep-alive:
    # 0.2 s was a stall of the test's loop away from a third connection on a loaded machine.
    transport = UpstreamTransport(keepalive_expiry=1.0)
    async with _client(transport) as client:
        await _complete(client, llm_upstream.url)
        await asyncio.sleep(1.2)
        await _complete(client, llm_upstream.url)
        assert transport.opened == 2
        await _complete(client, llm_upstream.url)
        assert transport.opened == 2


async def test_an_unreachable_upstream_is_a_connect_error_and_frees_its_place() -> None:
    transport = UpstreamTransport(max_connections=1)
    async with _client(transport) as client:
        for _ in range(3):
            with pytest.raises(httpx.ConnectError):
                await client.post("http://127.0.0.1:9/v1/complete", content=json.dumps(TOKENS))
    assert transport.busy == 0


async def test_an_upstream_that_gets_no_more_calls_keeps_no_idle_connection(
    llm_upstream: AppProcess,
) -> None:
    """Idle connections past their keep-alive are closed whichever upstream a call went to."""
    other = llm_upstream.url.replace("127.0.0.1", "localhost")  # (another origin, same server)
    transport = UpstreamTransport(keepalive_expiry=0.2)
    async with _client(transport) as client:
        await _complete(client, llm_upstream.url)
        assert transport.idle == 1
        await asyncio.sleep(0.4)
        await _complete(client, other)
        assert transport.idle == 1  # the other's; the first upstream's one was closed
        assert transport.opened == 2
