"""Attacks on the MCP gateway, each named for what it stops (docs/mcp.md).

Raw JSON-RPC over httpx against a real x402srv in front of a real FastMCP
upstream, payments signed for the session's anvil: a payment replayed or sent
many times at once is settled once and runs the tool once, a failed payment
runs nothing, hostile messages get JSON-RPC errors and never reach the
upstream, and credits cannot be over-spent by racing calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.clock import until_clear_of_a_window_end
from tests.support.mcp import (
    CALLS_PLAN,
    HOURLY_PLAN,
    REPORT_AMOUNT,
    answer_of,
    mcp_table,
    open_session,
    rpc,
    upstream_runs,
)
from tests.support.purchase import buy
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import signed_payment


def url(seller: Seller) -> str:
    return f"{seller.server.url}/mcp"


def paid_by(devchain: Devchain, seller: Seller, buyer: LocalAccount) -> list[int]:
    return [
        log.value
        for log in devchain.transfer_logs(to=seller.wallet)
        if log.from_address.lower() == buyer.address.lower()
    ]


def call(tool: str, arguments: dict[str, Any], id: int, payment: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if payment is not None:
        params["_meta"] = {"x402/payment": payment}
    return rpc("tools/call", params, id=id)


async def offered(http: httpx.AsyncClient, seller: Seller, session: dict[str, str]) -> Any:
    """The payment-required result of an unpaid ``report`` call."""
    answer = answer_of(
        await http.post(url(seller), json=call("report", {"city": "x"}, 1), headers=session)
    )
    return answer["result"]["structuredContent"]


async def test_advisory_one_payment_sent_ten_times_at_once_runs_the_tool_once(
    mcp_seller: Seller, mcp_upstream: AppProcess, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    before = (await upstream_runs(mcp_upstream.url)).get("report", 0)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url(mcp_seller))
        required = await offered(http, mcp_seller, session)
        payment = signed_payment(buyer, devchain.token, required["accepts"][0])
        answers = await asyncio.gather(
            *(
                http.post(
                    url(mcp_seller),
                    json=call("report", {"city": "x"}, 10 + n, payment),
                    headers=session,
                )
                for n in range(10)
            )
        )
        results = [answer_of(a) for a in answers]
        ran = [r for r in results if "result" in r and not r["result"].get("isError")]
        assert len(ran) == 1, results
        assert ran[0]["result"]["_meta"]["x402/payment-response"]["success"] is True
        # and sent once more, later: the one call it bought has run
        again = answer_of(
            await http.post(
                url(mcp_seller), json=call("report", {"city": "x"}, 99, payment), headers=session
            )
        )
    assert again["result"]["isError"] is True
    assert "already paid for one call" in again["result"]["structuredContent"]["error"]
    assert paid_by(devchain, mcp_seller, buyer) == [REPORT_AMOUNT]
    assert (await upstream_runs(mcp_upstream.url))["report"] == before + 1


async def test_advisory_a_payment_that_fails_settlement_forwards_nothing(
    mcp_seller: Seller, mcp_upstream: AppProcess, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    before = await upstream_runs(mcp_upstream.url)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url(mcp_seller))
        required = await offered(http, mcp_seller, session)
        short = signed_payment(buyer, devchain.token, required["accepts"][0], value=1)
        answer = answer_of(
            await http.post(
                url(mcp_seller), json=call("report", {"city": "x"}, 2, short), headers=session
            )
        )
    result = answer["result"]
    assert result["isError"] is True and result["structuredContent"]["code"] == "PAYMENT_FAILED"
    assert result["structuredContent"]["accepts"]  # pay again: the requirements come back
    assert paid_by(devchain, mcp_seller, buyer) == []
    assert await upstream_runs(mcp_upstream.url) == before


async def test_advisory_a_payment_for_another_tool_plan_is_not_settled(
    mcp_seller: Seller, mcp_upstream: AppProcess, devchain: Devchain
) -> None:
    """A per-call payment for ``report`` does not open ``forecast``."""
    buyer = devchain.new_account(eth=0)
    before = await upstream_runs(mcp_upstream.url)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url(mcp_seller))
        required = await offered(http, mcp_seller, session)
        payment = signed_payment(buyer, devchain.token, required["accepts"][0])
        answer = answer_of(
            await http.post(
                url(mcp_seller), json=call("forecast", {"city": "x"}, 2, payment), headers=session
            )
        )
    assert answer["result"]["isError"] is True
    assert "does not open the tool 'forecast'" in answer["result"]["structuredContent"]["error"]
    assert paid_by(devchain, mcp_seller, buyer) == []
    assert await upstream_runs(mcp_upstream.url) == before


def _huge() -> dict[str, Any]:
    return call("forecast", {"city": "x" * (2 * 1024 * 1024)}, 7)


HOSTILE: dict[str, tuple[Callable[[], bytes], int, int]] = {
    "not json": (lambda: b"{not json", 400, -32700),
    "nested too deep": (lambda: b"[" * 100_000, 400, -32700),
    "a batch": (lambda: json.dumps([call("forecast", {"city": "x"}, 1)]).encode(), 400, -32600),
    "a batch smuggling a call behind a free one": (
        lambda: json.dumps([call("ping", {}, 1), call("report", {"city": "x"}, 2)]).encode(),
        400,
        -32600,
    ),
    "tools/call as a notification": (
        lambda: json.dumps(
            {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "report"}}
        ).encode(),
        400,
        -32600,
    ),
    "no jsonrpc version": (
        lambda: json.dumps({"id": 1, "method": "tools/call"}).encode(),
        400,
        -32600,
    ),
    "params not an object": (
        lambda: json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ["report"]}
        ).encode(),
        400,
        -32600,
    ),
    "an id that is an object": (
        lambda: json.dumps(
            {"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/call", "params": {}}
        ).encode(),
        400,
        -32600,
    ),
    "huge arguments": (lambda: json.dumps(_huge()).encode(), 413, -32600),
    "a tool name that is not a string": (
        lambda: json.dumps(rpc("tools/call", {"name": 5}, id=3)).encode(),
        400,
        -32602,
    ),
    "a payment that is not an object": (
        lambda: json.dumps(call("report", {"city": "x"}, 4, payment="AAAA")).encode(),
        200,
        -32000,
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
async def test_advisory_hostile_messages_get_json_rpc_errors_and_reach_nothing(
    mcp_seller: Seller, mcp_upstream: AppProcess, name: str
) -> None:
    body, status, code = HOSTILE[name]
    before = await upstream_runs(mcp_upstream.url)
    metrics_before = _challenges(mcp_seller)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url(mcp_seller))
        answer = await http.post(url(mcp_seller), content=body(), headers=session)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert await upstream_runs(mcp_upstream.url) == before  # the upstream saw nothing
    assert _challenges(mcp_seller) == metrics_before  # nothing stored


def _challenges(seller: Seller) -> str:
    text = httpx.get(f"{seller.server.url}/metrics").text
    return "".join(
        line for line in text.splitlines() if line.startswith("x402srv_challenges_created_total")
    )


async def test_advisory_unpaid_calls_count_against_the_unpaid_limit(
    start_seller: Callable[..., Seller], mcp_upstream: AppProcess
) -> None:
    seller = start_seller(
        "gas-wallet",
        plans=[CALLS_PLAN, HOURLY_PLAN],
        mcp=[mcp_table(mcp_upstream.url)],
        rate_limit={"unpaid_requests": 3, "window_seconds": 3600},
    )
    await asyncio.sleep(until_clear_of_a_window_end(3600, needed=30))  # (an hour's end)
    async with httpx.AsyncClient(timeout=60) as http:
        session = await open_session(http, url(seller))
        answers = [
            answer_of(
                await http.post(url(seller), json=call("report", {"city": "x"}, n), headers=session)
            )
            for n in range(5)
        ]
        free = answer_of(await http.post(url(seller), json=call("ping", {}, 9), headers=session))
    assert [a["result"]["isError"] for a in answers[:3]] == [True, True, True]
    assert [a["error"]["data"]["code"] for a in answers[3:]] == ["RATE_LIMITED"] * 2
    assert free["result"]["content"][0]["text"] == "pong"  # free tools are not limited


def _store(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    redis_url: str = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": redis_url, "redis": {"key_prefix": f"mcp-{id(request)}:"}}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_advisory_200_tool_calls_at_once_against_50_credits_run_exactly_50(
    start_seller: Callable[..., Seller],
    mcp_upstream: AppProcess,
    buyer: LocalAccount,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    seller = start_seller(
        "gas-wallet",
        workers=2,
        plans=[CALLS_PLAN, HOURLY_PLAN],
        mcp=[mcp_table(mcp_upstream.url)],
        store=_store(backend, request),
    )
    grant = await buy(seller, buyer, "calls-50")
    before = (await upstream_runs(mcp_upstream.url)).get("forecast", 0)
    bearer = f"Bearer {grant['accessToken']}"
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        session = await open_session(http, url(seller), Authorization=bearer)
        answers = await asyncio.gather(
            *(
                http.post(url(seller), json=call("forecast", {"city": "x"}, n), headers=session)
                for n in range(200)
            )
        )
    results = [answer_of(a)["result"] for a in answers]
    ran = [r for r in results if not r.get("isError")]
    refused = [r for r in results if r.get("isError")]
    assert len(ran) == 50
    assert {r["structuredContent"]["code"] for r in refused} == {"CREDITS_EXHAUSTED"}
    assert (await upstream_runs(mcp_upstream.url))["forecast"] == before + 50
