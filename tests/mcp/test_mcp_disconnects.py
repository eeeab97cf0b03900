"""Buyers who leave a tool call give the MCP gateway's upstream connections back, and pay right.

Real processes: x402srv with ``[[mcp]]`` tables (sqlite) in front of a FastMCP
server of this module's own (``tests/support/mcp_upstream.py``: nothing else
connects to it). Buyers on real sockets call tools that stream progress, one
spending a credit a call (``count``) and one charged by use (``write``: it
reports its cost in its result), and leave: in the middle of the answer, all
at once the way ``wrk`` ends a run (some with a plain close, some with a
reset), as the upstream's answer ends (injected: ``leaving_at_the_end``), or as
the gateway's connection to the upstream opens, before the call went out
(injected: ``leaving_on_connect``).

The MCP gateway calls its upstreams through the gateway's client and pool
(``x402srv.gateway.upstreams``), so the HTTP gateway's hazards are its own
(``tests/integrations/test_gateway_disconnects.py``): a connection a cancelled
handler left checked out holds one of the pool's 100 places for good, and
enough of them make every call wait for the pool (``UPSTREAM_TIMEOUT``). What is
checked is what the machine shows: no socket to the upstream stays open, the
next calls, as many at once as the pool holds, all answer, and each buyer who
left paid what its call held (docs/mcp.md).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess, held_mid_answer, leave_at_once, open_sockets_to
from tests.support.cli import x402srv
from tests.support.credentials import bearer
from tests.support.faults import leaving_at_the_end, leaving_on_connect
from tests.support.mcp import MCP_HEADERS, answer_of, open_session, rpc
from tests.support.purchase import buy
from tests.support.seller import Seller
from x402srv.testing.launcher import FRESH_ENV
from x402srv.testing.servers import free_port

LEAVING = 50  # buyers who leave at once (wrk's -c50)
AT_ONCE = 20  # buyers who call at once, each leaving as its answer ends
POOL = 100  # the gateway's client's max_connections
CREDITS = 1_000_000
PLANS = [{"plan_id": "many", "unit_amount": "$0.50", "description": "Tool calls", "calls": CREDITS}]
RESERVE = 20  # what a call of ``write`` holds until its result reports its cost
TOOLS = {"count": {"cost": 1}, "write": {"cost": {"reserve": RESERVE, "from": "meta"}}}
#: Each pool check call holds its upstream connection ~2 s, twice as long as a call waits
#: for a place in the pool: one place never given back and a call fails.
HOLD = {"words": 2, "delay": 1.0}

_ids = itertools.count(100)


def _table(path: str, upstream_url: str) -> dict[str, Any]:
    return {
        "path": path,
        "upstream": f"{upstream_url}/mcp",
        "plans": ["many"],
        "tools": TOOLS,
        "connect_timeout_seconds": 1,  # (also the wait for a place in the pool)
    }


@pytest.fixture(scope="module")
def leaving_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    log = tmp_path_factory.mktemp("mcp-leaving-upstream") / "upstream.log"
    process = AppProcess("tests.support.mcp_upstream:app", log).start()
    yield process
    process.stop()


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    """A ``tools/call`` with an id of its own (the upstream keys a session's answers by id).

    Its ``progressToken`` asks for the tool's progress events: a tool sends none without.
    """
    id = next(_ids)
    params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": id}}
    return rpc("tools/call", params, id=id)


async def _post(url: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
    """A raw POST of ``body`` to x402srv: its socket's (reader, writer), the request sent."""
    host, _, port = url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    head += [f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in headers.items())]
    writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + data)
    return reader, writer


async def _start_call(url: str, headers: dict[str, str], tool: str, arguments: Any) -> Any:
    """A raw call read up to its first progress event; its socket, still open."""
    reader, writer = await _post(url, "/mcp", headers, _call(tool, **arguments))
    return await held_mid_answer(
        reader, writer, b"notifications/progress", f"{tool}, first progress event"
    )


async def _leave_mid_answer(url: str, headers: dict[str, str], tool: str, arguments: Any) -> None:
    """``LEAVING`` buyers in the middle of their answers, then all gone at once."""
    await leave_at_once(
        await asyncio.gather(*(_start_call(url, headers, tool, arguments) for _ in range(LEAVING)))
    )


async def _leave_as_it_ends(url: str, headers: dict[str, str], tool: str, arguments: Any) -> None:
    """A short call whose buyer reads up to the tool's result (or the end), then is gone."""
    reader, writer = await _post(url, "/mcp", headers, _call(tool, **arguments))
    try:
        status = await asyncio.wait_for(reader.readline(), 10)
        assert status.startswith(b"HTTP/1.1 200"), f"{status!r}, {await reader.read(500)!r}"
        seen = b""
        while b'"result"' not in seen:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break  # (the injected cancellation cut the answer's end: the buyer is gone)
            seen += chunk
    finally:
        writer.transport.abort()


async def _pool_answers_all(url: str, headers: dict[str, str]) -> None:
    """As many calls at once as the pool holds, each holding its place 2 s: every one answers."""
    started = time.monotonic()
    limits = httpx.Limits(max_connections=POOL)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        answers = await asyncio.gather(
            *(client.post(url, json=_call("write", **HOLD), headers=headers) for _ in range(POOL))
        )
    results = [answer_of(answer) for answer in answers]
    failed = [r for r in results if "result" not in r or r["result"].get("isError")]
    assert not failed, f"{len(failed)} of {POOL} failed: {failed[:1]!r}"
    assert time.monotonic() - started < 15


async def _balance_after_one_more_call(url: str, headers: dict[str, str]) -> int:
    """A plain paid call, answered promptly; the credits left after it."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=10) as client:
        answer = answer_of(await client.post(url, json=_call("write", words=3), headers=headers))
    assert time.monotonic() - started < 5
    result = answer["result"]
    assert not result.get("isError"), result
    usage = result["_meta"]["x402srv/usage"]
    assert (usage["reserved"], usage["charged"]) == (RESERVE, 3)
    balance: int = usage["balance"]
    return balance


def _credits(seller: Seller, challenge_id: str) -> dict[str, Any]:
    """The grant's account, as ``challenges show`` prints it (read from the store)."""
    shown = x402srv(seller, "challenges", "show", challenge_id)
    assert shown.returncode == 0, shown.stderr
    credits: dict[str, Any] = json.loads(shown.stdout)["credits"]
    return credits


def _charged_by_use(seller: Seller, challenge_id: str) -> list[tuple[str, int, int]]:
    """The grant's calls charged by use (its newest 100), as ``challenges show`` lists them."""
    calls = _credits(seller, challenge_id)["calls_charged_by_use"]
    return [(c["route"], c["reserved"], c["charged"]) for c in calls]


async def _credits_once(
    seller: Seller, challenge_id: str, settled: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The grant's account once ``settled`` holds for it, or as it is after 5 s."""
    deadline = time.monotonic() + 5
    while not settled(credits := _credits(seller, challenge_id)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    return credits


async def _wait_for_calls(seller: Seller, challenge_id: str, count: int) -> list[Any]:
    deadline = time.monotonic() + 5
    while len(calls := _charged_by_use(seller, challenge_id)) < count:
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return calls


async def _session(url: str, token: str) -> dict[str, str]:
    """A buyer's MCP session through x402srv: the headers each of its calls sends."""
    async with httpx.AsyncClient(timeout=10) as client:
        return {**await open_session(client, url), **bearer(token)}


async def _buyers_left_mid_answer(
    seller: Seller, upstream: AppProcess, buyer: LocalAccount, tool: str, **arguments: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """100 buyers leave 3-second calls of ``tool`` after its first progress event.

    Returns the grant they called with and its session's headers, once no
    connection of x402srv's to the upstream is open any more.
    """
    url = seller.server.url
    grant = await buy(seller, buyer, "many")
    session = await _session(f"{url}/mcp", grant["accessToken"])
    for _ in range(2):  # wrk's runs, one after another
        await _leave_mid_answer(url, session, tool, arguments)
    deadline = time.monotonic() + 5
    while (still := open_sockets_to(upstream.port)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert still == 0, f"{still} upstream connections still held after the buyers left"
    return grant, session


async def test_buyers_leaving_mid_answer_leave_no_upstream_connection_checked_out(
    start_seller: Callable[..., Seller], leaving_upstream: AppProcess, buyer: LocalAccount
) -> None:
    """Each call was forwarded and ran: it keeps the credit it spent when its buyer left."""
    seller = start_seller("gas-wallet", plans=PLANS, mcp=[_table("/mcp", leaving_upstream.url)])
    url = f"{seller.server.url}/mcp"
    _, session = await _buyers_left_mid_answer(seller, leaving_upstream, buyer, "count", to=60)
    await _pool_answers_all(url, session)
    balance = await _balance_after_one_more_call(url, session)
    assert balance == CREDITS - 2 * LEAVING * 1 - POOL * HOLD["words"] - 3


async def test_a_call_charged_by_use_whose_buyer_left_mid_answer_is_settled_on_its_reservation(
    start_seller: Callable[..., Seller], leaving_upstream: AppProcess, buyer: LocalAccount
) -> None:
    """Its result, and the cost it reports, never came through: it keeps the whole reservation.

    Settled on it, as a gateway route's call is when its buyer leaves mid-answer
    (docs/selling-calls.md, "Charging by use"), it is listed with the grant's other
    calls (``challenges show``, the console). The MCP gateway settled such a call
    only when its result went out or the upstream failed: the call held its
    reservation unsettled, charged the same but listed nowhere.
    """
    seller = start_seller("gas-wallet", plans=PLANS, mcp=[_table("/mcp", leaving_upstream.url)])
    url = f"{seller.server.url}/mcp"
    grant, session = await _buyers_left_mid_answer(
        seller, leaving_upstream, buyer, "write", words=60
    )
    calls = await _wait_for_calls(seller, grant["challengeId"], 2 * LEAVING)
    assert calls == [("/mcp:write", RESERVE, RESERVE)] * (2 * LEAVING)
    await _pool_answers_all(url, session)
    balance = await _balance_after_one_more_call(url, session)
    assert balance == CREDITS - 2 * LEAVING * RESERVE - POOL * HOLD["words"] - 3


def _tool_calls(url: str, tool: str) -> dict[str, float]:
    """``x402srv_mcp_tool_calls_total`` of ``tool`` by outcome, read from x402srv's /metrics."""
    text = httpx.get(f"{url}/metrics").text
    pattern = rf'^x402srv_mcp_tool_calls_total\{{outcome="([a-z_]+)",tool="{tool}"\}} (\S+)$'
    return {outcome: float(n) for outcome, n in re.findall(pattern, text, re.M)}


async def test_a_tool_call_whose_buyer_left_mid_answer_is_counted_abandoned_in_metrics(
    start_seller: Callable[..., Seller], leaving_upstream: AppProcess, buyer: LocalAccount
) -> None:
    """The buyer's going is not the MCP server's failure: the metric says ``abandoned``.

    Such a call was counted ``upstream_error``, so a seller alerting on that outcome
    was paged by buyers who closed their connections. The word is the gateways'
    (``abandoned``: ``UsageCall.abandoned``, ``_Door.abandoned``); docs/mcp.md lists it.
    """
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        mcp=[_table("/mcp", leaving_upstream.url)],
        metrics={"enabled": True},
    )
    url = seller.server.url
    grant = await buy(seller, buyer, "many")
    session = await _session(f"{url}/mcp", grant["accessToken"])
    leaving = 4
    await leave_at_once(
        await asyncio.gather(
            *(_start_call(url, session, "count", {"to": 60}) for _ in range(leaving))
        )
    )
    deadline = time.monotonic() + 5
    while sum((counted := _tool_calls(url, "count")).values()) < leaving:
        assert time.monotonic() < deadline, counted
        await asyncio.sleep(0.1)
    assert counted == {"abandoned": leaving}


async def test_buyers_leaving_as_the_answer_ends_leave_no_upstream_connection_and_pay_right(
    start_seller: Callable[..., Seller],
    leaving_upstream: AppProcess,
    buyer: LocalAccount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each buyer leaves as the upstream's last chunk passes; the pool keeps its connections.

    The cancellation is injected at that instant for each answer of the upstream
    at 127.0.0.1 (``leaving_at_the_end``, as in the HTTP gateway's test); the calls
    that check the pool afterwards reach the same upstream as ``localhost``
    (``/check``), which the injection leaves alone. The tool's result went through
    x402srv before its buyer left, so each call is charged what it reported.
    """
    monkeypatch.setenv(FRESH_ENV, "1")  # (a fresh interpreter reads the sitecustomize)
    checked = leaving_upstream.url.replace("127.0.0.1", "localhost")
    assert checked != leaving_upstream.url
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        mcp=[_table("/mcp", leaving_upstream.url), _table("/check", checked)],
        env=leaving_at_the_end(leaving_upstream.url),
    )
    monkeypatch.delenv(FRESH_ENV)  # (``challenges show`` needs none: forked from the warm one)
    url = seller.server.url
    grant = await buy(seller, buyer, "many")
    # (Opened through /check: every answer through /mcp has its handler cancelled.)
    session = await _session(f"{url}/check", grant["accessToken"])
    leaving = [("count", {"to": 2}, 1), ("write", {"words": 2, "delay": 0}, 2)] * 3
    for tool, arguments, _ in leaving:  # 120 buyers
        await asyncio.gather(
            *(_leave_as_it_ends(url, session, tool, arguments) for _ in range(AT_ONCE))
        )
    calls = await _wait_for_calls(seller, grant["challengeId"], 3 * AT_ONCE)
    assert calls == [("/mcp:write", RESERVE, 2)] * (3 * AT_ONCE)
    await _pool_answers_all(f"{url}/check", session)
    balance = await _balance_after_one_more_call(f"{url}/check", session)
    spent = sum(AT_ONCE * charged for _, _, charged in leaving)
    assert balance == CREDITS - spent - POOL * HOLD["words"] - 3


async def _leave_as_it_connects(
    url: str, headers: dict[str, str], tool: str, arguments: Any
) -> None:
    """A call whose buyer is gone once the gateway's upstream connection opens (injected).

    (The injected cancellation, with the buyer's socket still open, is answered 500
    by Sanic; a real buyer is gone by then.)
    """
    reader, writer = await _post(url, "/mcp", headers, _call(tool, **arguments))
    try:
        status = await asyncio.wait_for(reader.readline(), 10)
        assert status.startswith(b"HTTP/1.1 500"), f"{status!r}, {await reader.read(500)!r}"
    finally:
        writer.transport.abort()


async def test_a_tool_call_whose_buyer_left_before_it_was_sent_upstream_is_charged_nothing(
    start_seller: Callable[..., Seller],
    leaving_upstream: AppProcess,
    buyer: LocalAccount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Gone as the gateway's connection to the MCP server opens: the server saw nothing.

    A call charged by use was settled on its whole reservation (20 credits), and a
    plain call kept the credit it spent, though no byte of either went out. Now such
    a call is settled at 0, or its credits go back (docs/mcp.md, "Tools charged by
    use"), as a gateway route's call is (docs/selling-calls.md, "Charging by use").
    The cancellation is injected as each connection to the upstream's port opens
    (``leaving_on_connect``), so the calls need no session there; the balance is
    read from the store (``challenges show``), and the upstream counts no run.
    """
    monkeypatch.setenv(FRESH_ENV, "1")  # (a fresh interpreter reads the sitecustomize)
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        mcp=[_table("/mcp", leaving_upstream.url)],
        env=leaving_on_connect(leaving_upstream.port),
    )
    monkeypatch.delenv(FRESH_ENV)  # (``challenges show`` needs none: forked from the warm one)
    grant = await buy(seller, buyer, "many")
    challenge_id = grant["challengeId"]
    headers = {**MCP_HEADERS, **bearer(grant["accessToken"])}
    async with httpx.AsyncClient(timeout=10) as client:
        before = (await client.get(f"{leaving_upstream.url}/_control/runs")).json()
    leaving = [("write", {"words": 2}), ("count", {"to": 2})] * 5
    await asyncio.gather(
        *(_leave_as_it_connects(seller.server.url, headers, t, a) for t, a in leaving)
    )
    credits = await _credits_once(
        seller,
        challenge_id,
        lambda now: now["credits_left"] == CREDITS and len(now["calls_charged_by_use"]) == 5,
    )
    calls = [(c["route"], c["reserved"], c["charged"]) for c in credits["calls_charged_by_use"]]
    assert calls == [("/mcp:write", RESERVE, 0)] * 5
    assert credits["credits_left"] == CREDITS, credits
    async with httpx.AsyncClient(timeout=10) as client:
        after = (await client.get(f"{leaving_upstream.url}/_control/runs")).json()
    assert after == before  # (no call reached the MCP server)


async def test_a_tool_call_to_a_server_that_cannot_be_reached_costs_nothing(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """``refund_on_error = false`` keeps a failed call's credits, but not of a call never sent.

    Nothing listens at the MCP server's address: each call fails before a byte of it
    went out. It kept its credits like a call the server failed (the reservation of a
    call charged by use, the credit of a plain one); now it costs nothing.
    """
    gone = {**_table("/mcp", f"http://127.0.0.1:{free_port()}"), "refund_on_error": False}
    seller = start_seller("gas-wallet", plans=PLANS, mcp=[gone])
    grant = await buy(seller, buyer, "many")
    headers = {**MCP_HEADERS, **bearer(grant["accessToken"])}
    async with httpx.AsyncClient(timeout=10) as client:
        for tool, arguments in [("write", {"words": 2}), ("count", {"to": 2})]:
            answer = await client.post(
                f"{seller.server.url}/mcp", json=_call(tool, **arguments), headers=headers
            )
            assert answer.status_code == 200, answer.text
            assert "cannot be reached" in answer.json()["error"]["message"]
    credits = _credits(seller, grant["challengeId"])
    assert credits["credits_left"] == CREDITS, credits
    calls = [(c["route"], c["reserved"], c["charged"]) for c in credits["calls_charged_by_use"]]
    assert calls == [("/mcp:write", RESERVE, 0)]
