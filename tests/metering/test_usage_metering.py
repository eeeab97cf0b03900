"""Routes charged by use: reserve before, settle what the upstream reported after.

Real processes: x402srv's gateway, the sample streaming "LLM" upstream
(``docs/samples/llm_stream_upstream.py``, under uvicorn) with the routes of
``docs/samples/usage-routes.toml``, and the official x402 client paying the
first call. docs/selling-calls.md, "Charging by use", is what is checked.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import h11
import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.console import ADMIN_TOKEN, Console, console_pages
from tests.support.credentials import bearer
from tests.support.faults import leaving_at_the_end, leaving_in_spend
from tests.support.metering import limits
from tests.support.paths import REPO
from tests.support.seller import Seller
from tests.support.trailers import TrailerUpstream, read_with_trailers
from x402srv.testing.buyers import paying_client
from x402srv.testing.launcher import FRESH_ENV
from x402srv.testing.servers import free_port

SAMPLES = REPO / "docs" / "samples"
TOML = tomllib.loads((SAMPLES / "usage-routes.toml").read_text())
RESERVE = 2000


@pytest.fixture(scope="module")
def admin_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def trailer_upstream() -> Iterator[TrailerUpstream]:
    upstream = TrailerUpstream().start()
    yield upstream
    upstream.stop()


def _routes(upstream: str, trailed: str) -> list[dict[str, Any]]:
    routes = [{**route, "upstream": upstream} for route in TOML["routes"]]
    # a chunked answer whose cost comes in its trailer section
    routes.append(
        {
            "prefix": "/v1/trailed",
            "upstream": trailed,
            "plans": ["tokens"],
            "cost": {"reserve": RESERVE, "from": "trailer", "header": "X-Usage-Cost"},
        }
    )
    # a route no grant can reserve for once it spent anything: the refusal
    routes.append(
        {
            "prefix": "/v1/whole",
            "upstream": upstream,
            "plans": ["tokens"],
            "cost": {"reserve": 100_000, "from": "header"},
        }
    )
    # no report: costs nothing, by the seller's choice
    routes.append(
        {
            "prefix": "/v1/lenient",
            "upstream": upstream,
            "plans": ["tokens"],
            "strip_prefix": True,
            "cost": {"reserve": 50, "from": "header", "on_missing": "nothing"},
        }
    )
    # a body of at most 100 bytes: one streamed past it fails after the call went out
    routes.append(
        {
            "prefix": "/v1/small",
            "upstream": upstream,
            "plans": ["tokens"],
            "strip_prefix": True,
            "max_body_bytes": 100,
            "cost": {"reserve": 50, "from": "header", "header": "X-Usage-Cost"},
        }
    )
    # the same upstream, sold by time and not metered: the TTFB baseline
    routes.append(
        {"prefix": "/plain", "upstream": upstream, "plans": ["hour"], "strip_prefix": True}
    )
    return routes


HOUR = {"plan_id": "hour", "unit_amount": "$0.01", "description": "An hour, unmetered"}


@pytest.fixture(scope="module")
def usage_gateway(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    trailer_upstream: TrailerUpstream,
    admin_port: int,
) -> Seller:
    return start_seller(
        "gas-wallet",
        plans=[*TOML["plans"], HOUR],
        routes=_routes(llm_upstream.url, trailer_upstream.url),
        admin={"token": ADMIN_TOKEN, "port": admin_port},  # the console lists used calls
    )


def _left(response: httpx.Response) -> int:
    return limits(response.headers["ratelimit"])["credits"]["r"]


async def _settled_balance(gateway: Seller, token: str, expected: int) -> int:
    """The balance once the gateway's own work after a buyer left has landed.

    A buyer who left waits for nothing, and neither does this: it makes calls
    costing 1 each until one sees ``expected`` less their number, or 10 s went
    by, and answers the balance before them.
    """
    deadline = time.monotonic() + 10
    async with httpx.AsyncClient(timeout=30) as client:
        for tries in itertools.count(1):
            after = await client.post(
                f"{gateway.server.url}/v1/count", json={"max_tokens": 1}, headers=bearer(token)
            )
            assert after.status_code == 200, after.text
            if _left(after) == expected - tries or time.monotonic() > deadline:
                return _left(after) + tries
            await asyncio.sleep(0.05)
    raise AssertionError("unreachable")


async def _bought(gateway: Seller, buyer: LocalAccount) -> tuple[str, httpx.Response]:
    """The official client pays the 402 of a header-metered call: its token and answer."""
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.post(f"{gateway.server.url}/v1/count", json={"max_tokens": 7})
    assert paid.status_code == 200, paid.text
    return paid.headers["x-x402-access-token"], paid


def _events(text: str) -> list[tuple[str, str]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            events.append((fields.get("event", ""), fields.get("data", "")))
    return events


async def _stream(
    client: httpx.AsyncClient, url: str, token: str, tokens: int
) -> tuple[float, httpx.Response, list[tuple[str, str]]]:
    """One streamed completion: time to first byte, the answer, its events."""
    started = time.perf_counter()
    body = {"max_tokens": tokens, "delay": 0.002}
    headers = bearer(token) if token else {}  # the upstream direct takes none
    async with client.stream("POST", url, json=body, headers=headers) as answer:
        chunks = answer.aiter_bytes()
        first = await anext(chunks)
        ttfb = time.perf_counter() - started
        rest = [first] + [chunk async for chunk in chunks]
    return ttfb, answer, _events(b"".join(rest).decode())


async def test_streamed_completions_are_charged_what_they_used(
    usage_gateway: Seller, llm_upstream: AppProcess, buyer: LocalAccount
) -> None:
    token, paid = await _bought(usage_gateway, buyer)
    http, _ = paying_client(buyer)
    async with http:  # an hour of the unmetered route, for the TTFB baseline
        hour = await http.post(f"{usage_gateway.server.url}/plain/v1/count", json={})
    assert hour.status_code == 200, hour.text
    plain_token = hour.headers["x-x402-access-token"]
    assert paid.headers["x-x402-cost"] == "7"  # the paying call too: 7 of its 2000 reserved
    assert _left(paid) == 100_000 - 7
    balance = 100_000 - 7
    figures = []
    async with httpx.AsyncClient(timeout=30) as client:
        # (the upstream's own first completion takes ~70 ms on a slow machine: not the
        # gateway's time, so it is not in the first one's figures)
        await _stream(client, f"{llm_upstream.url}/v1/complete", "", 1)
        for tokens in (120, 45, 300):
            ttfb, answer, events = await _stream(
                client, f"{usage_gateway.server.url}/v1/complete", token, tokens
            )
            assert answer.status_code == 200
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert answer.headers["x-x402-reserved"] == str(RESERVE)
            assert _left(answer) == balance - RESERVE  # held while it streams
            assert [e for e, _ in events].count("token") == tokens
            assert events[-2] == ("usage", json.dumps({"cost": tokens}))  # the upstream's
            name, data = events[-1]
            assert name == "x402-usage"
            balance -= tokens
            assert json.loads(data) == {"reserved": RESERVE, "charged": tokens, "balance": balance}
            plain_ttfb, plain, _ = await _stream(
                client, f"{usage_gateway.server.url}/plain/v1/complete", plain_token, tokens
            )
            assert plain.status_code == 200 and "x-x402-reserved" not in plain.headers
            direct_ttfb, _, _ = await _stream(client, f"{llm_upstream.url}/v1/complete", "", tokens)
            figures.append((tokens, balance, ttfb, plain_ttfb, direct_ttfb))
    for tokens, left, ttfb, plain_ttfb, direct in figures:
        print(
            f"\nstreamed completion: cost {tokens} tokens, balance after {left}, TTFB metered "
            f"{ttfb * 1000:.1f} ms, unmetered {plain_ttfb * 1000:.1f} ms (same gateway), "
            f"upstream direct {direct * 1000:.1f} ms"
        )
    # The first byte is not held for the cost: the stream starts as the unmetered one does,
    # give or take the reservation's one store round trip (a loaded machine: a loose bound).
    metered = sorted(f[2] for f in figures)[1]
    unmetered = sorted(f[3] for f in figures)[1]
    assert metered < unmetered + 0.25


async def test_a_header_report_is_settled_before_the_answer_and_capped(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid)
    url = usage_gateway.server.url
    async with httpx.AsyncClient(timeout=30) as client:
        over = await client.post(
            f"{url}/v1/count", json={"max_tokens": 5000}, headers=bearer(token)
        )
        assert over.status_code == 200
        assert over.headers["x-x402-cost"] == str(RESERVE)  # capped at the reservation
        assert _left(over) == balance - RESERVE
        balance -= RESERVE
        missing = await client.post(
            f"{url}/v1/count", json={"max_tokens": 3, "report": False}, headers=bearer(token)
        )
        assert missing.headers["x-x402-cost"] == str(RESERVE)  # on_missing = "reserve"
        assert _left(missing) == balance - RESERVE
        balance -= RESERVE
        lenient = await client.post(
            f"{url}/v1/lenient/v1/count",
            json={"max_tokens": 3, "report": False},
            headers=bearer(token),
        )
        assert lenient.status_code == 200, lenient.text
        assert lenient.headers["x-x402-cost"] == "0"  # on_missing = "nothing"
        assert _left(lenient) == balance


async def test_a_reservation_the_balance_cannot_hold_is_refused_and_spends_nothing(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid)
    url = usage_gateway.server.url
    async with httpx.AsyncClient(timeout=30) as client:
        refused = await client.post(
            f"{url}/v1/whole", json={"max_tokens": 1}, headers=bearer(token)
        )
        assert refused.status_code == 402
        body = refused.json()
        assert (body["code"], body["balance"], body["cost"]) == (
            "CREDITS_EXHAUSTED",
            balance,
            100_000,
        )
        after = await client.post(f"{url}/v1/count", json={"max_tokens": 1}, headers=bearer(token))
        assert _left(after) == balance - 1  # the refusal spent nothing


async def test_a_body_streamed_past_the_limit_after_the_call_went_out_is_not_refunded(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    """The buyer's body outgrows ``max_body_bytes`` once its call is on its way: 400.

    Without a ``Content-Length`` the gateway learns it too late: the call's head and
    the first 100 bytes are at the upstream already, which may be at work on them. It
    is the buyer's error, not the upstream's failure, so ``refund_on_5xx`` (on here)
    does not apply: charged the reservation, as a buyer who leaves mid-call is
    (docs/selling-calls.md, "Charging by use"), and as a call of a fixed cost keeps
    its credits. (The gateway once settled it at 0: a free call for any buyer that
    pads its body.) The same body declared too large up front never goes out: 0.
    """
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid)
    url = f"{usage_gateway.server.url}/v1/small/v1/count"

    async def padded() -> AsyncIterator[bytes]:  # (chunked: no Content-Length)
        yield b'{"max_tokens": 3, "pad": "'
        for _ in range(10):
            yield b"x" * 100
        yield b'"}'

    async with httpx.AsyncClient(timeout=30) as client:
        streamed = await client.post(url, content=padded(), headers=bearer(token))
        assert streamed.status_code == 400, streamed.text
        assert streamed.headers["x-x402-cost"] == "50"
        assert _left(streamed) == balance - 50
        declared = await client.post(url, content=b"x" * 1000, headers=bearer(token))
        assert declared.status_code == 400, declared.text
        assert declared.headers["x-x402-cost"] == "0"
        assert _left(declared) == balance - 50
    _logged_as_the_buyers_body(usage_gateway)


def _logged_as_the_buyers_body(gateway: Seller) -> None:
    """The seller's log says the body outgrew the limit, not that the upstream failed to report.

    (It once said "the upstream reported no valid cost": a seller would look for a fault
    in an upstream that did nothing wrong.) Only that test calls ``/v1/small``.
    """
    lines = [line for line in gateway.server.logs().splitlines() if "on /v1/small:" in line]
    assert any(
        "the request body passed max_body_bytes after the call went out; "
        "charged 50 of 50 reserved (nothing reported: the reservation)" in line
        for line in lines
    ), lines
    assert not any("reported no valid cost" in line for line in lines), lines


async def test_a_buyer_who_leaves_mid_stream_is_charged_the_reservation(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    """Gone before the upstream's usage event: the reservation, logged as the buyer's doing.

    (The log once said "the upstream reported no valid cost", a fault the upstream had not
    made: it never got to report.)
    """
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid)
    url = usage_gateway.server.url
    async with httpx.AsyncClient(timeout=30) as client:
        body = {"max_tokens": 500, "delay": 0.02}
        async with client.stream(
            "POST", f"{url}/v1/complete", json=body, headers=bearer(token)
        ) as answer:
            assert answer.status_code == 200
            assert answer.headers["x-x402-reserved"] == str(RESERVE)
            await anext(answer.aiter_bytes())  # one token, then gone
    assert await _settled_balance(usage_gateway, token, balance - RESERVE) == balance - RESERVE
    grant = f"grant {_grant_id(token)} on "
    lines = [line for line in usage_gateway.server.logs().splitlines() if grant in line]
    assert any(
        f"the buyer left mid-call; charged {RESERVE} of {RESERVE} reserved "
        "(nothing reported: the reservation)" in line
        for line in lines
    ), lines
    assert not any("reported no valid cost" in line for line in lines), lines


async def test_a_trailer_report_is_charged_and_the_buyer_reads_its_charge_in_trailers(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid)
    url = f"{usage_gateway.server.url}/v1/trailed"
    answer = await read_with_trailers(
        url, headers=bearer(token), body=json.dumps({"max_tokens": 40}).encode()
    )
    assert answer.status == 200
    assert answer.headers["x-x402-reserved"] == str(RESERVE)
    assert answer.headers["trailer"] == "X-X402-Cost, RateLimit"
    assert limits(answer.headers["ratelimit"])["credits"]["r"] == balance - RESERVE
    assert len(answer.body.splitlines()) == 40  # the body passed whole
    balance -= 40
    assert answer.trailers["x-x402-cost"] == "40"  # the upstream's trailer, settled
    assert limits(answer.trailers["ratelimit"])["credits"]["r"] == balance
    assert "x-usage-cost" not in answer.trailers  # the upstream's own trailer stays upstream

    silent = await read_with_trailers(
        url, headers=bearer(token), body=json.dumps({"max_tokens": 3, "report": False}).encode()
    )
    assert silent.trailers["x-x402-cost"] == str(RESERVE)  # no report: on_missing = "reserve"
    balance -= RESERVE
    async with httpx.AsyncClient(timeout=30) as client:  # httpx drops trailers: still whole
        plain = await client.post(url, json={"max_tokens": 5}, headers=bearer(token))
        assert plain.status_code == 200 and plain.text.count("\n") == 5
        balance -= 5
        after = await client.post(
            f"{usage_gateway.server.url}/v1/count", json={"max_tokens": 1}, headers=bearer(token)
        )
    assert _left(after) == balance - 1


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
async def test_a_buyer_who_leaves_as_the_answer_ends_is_charged_the_upstreams_report(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    trailer_upstream: TrailerUpstream,
    buyer: LocalAccount,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    """The buyer's socket closes as the upstream's last chunk reaches it.

    The upstream's answer is whole and its trailer reported the cost: the call is
    charged that, not the reservation of a buyer who left mid-answer. (The gateway
    once handed the upstream's connection back before it settled, and a buyer who
    left during that await turned the finished call into an abandoned one; on
    Redis, a buyer who left during the settlement's own store call cut it short and
    kept the whole reservation.) The cancellation is injected where the buyer's
    close lands (``leaving_at_the_end``).
    """
    store: dict[str, Any] = {"backend": "sqlite", "path": "x402srv.db"}
    if backend == "redis":
        url: str = request.getfixturevalue("redis_url")
        store = {"backend": "redis", "url": url, "redis": {"key_prefix": f"left-{id(request)}:"}}
    if backend == "postgres":
        store = request.getfixturevalue("postgres_store_table")
    monkeypatch.setenv(FRESH_ENV, "1")  # (a fresh interpreter reads the sitecustomize)
    gateway = start_seller(
        "gas-wallet",
        plans=[*TOML["plans"], HOUR],
        routes=_routes(llm_upstream.url, trailer_upstream.url),
        store=store,
        env=leaving_at_the_end(trailer_upstream.url),
    )
    token, paid = await _bought(gateway, buyer)
    balance = _left(paid)
    with contextlib.suppress(ConnectionError, h11.RemoteProtocolError):  # (it left: no end)
        await asyncio.wait_for(
            read_with_trailers(
                f"{gateway.server.url}/v1/trailed",
                headers=bearer(token),
                body=json.dumps({"max_tokens": 40}).encode(),
            ),
            timeout=10,
        )
    # 40 reported, not the 2000 reserved
    assert await _settled_balance(gateway, token, balance - 40) == balance - 40


async def test_a_buyer_who_leaves_while_its_reservation_is_spent_gets_it_back(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    trailer_upstream: TrailerUpstream,
    buyer: LocalAccount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The buyer's handler is cancelled while the store spends the call's reservation.

    The call is never forwarded, so nothing of it is charged: the spend, written
    by then, is given back once it is done. (The gateway once lost the spend's
    outcome with the cancellation: 2000 credits reserved for good.) The
    cancellation is injected just after the sqlite store wrote the spend
    (``leaving_in_spend``); a Postgres or Redis spend is a round trip long.
    """
    monkeypatch.setenv(FRESH_ENV, "1")  # (a fresh interpreter reads the sitecustomize)
    gateway = start_seller(
        "gas-wallet",
        plans=[*TOML["plans"], HOUR],
        routes=_routes(llm_upstream.url, trailer_upstream.url),
        env=leaving_in_spend("/v1/complete"),
    )
    token, paid = await _bought(gateway, buyer)
    balance = _left(paid)
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(3):
            with contextlib.suppress(httpx.HTTPError):  # (its handler is gone: no answer)
                await client.post(
                    f"{gateway.server.url}/v1/complete",
                    json={"max_tokens": 5},
                    headers=bearer(token),
                )
    assert await _settled_balance(gateway, token, balance) == balance  # the three back


async def test_an_event_stream_ends_with_the_usage_event_and_the_same_trailers(
    usage_gateway: Seller, buyer: LocalAccount
) -> None:
    token, paid = await _bought(usage_gateway, buyer)
    balance = _left(paid) - 12
    answer = await read_with_trailers(
        f"{usage_gateway.server.url}/v1/complete",
        headers=bearer(token),
        body=json.dumps({"max_tokens": 12}).encode(),
    )
    name, data = _events(answer.body.decode())[-1]
    assert name == "x402-usage"
    assert json.loads(data) == {"reserved": RESERVE, "charged": 12, "balance": balance}
    assert answer.trailers["x-x402-cost"] == "12"
    assert limits(answer.trailers["ratelimit"])["credits"]["r"] == balance


async def test_challenges_show_and_the_console_list_each_call_charged_by_use(
    usage_gateway: Seller, buyer: LocalAccount, admin_port: int
) -> None:
    token, _ = await _bought(usage_gateway, buyer)  # its paying call: /v1/count, 7 used
    url = usage_gateway.server.url
    async with httpx.AsyncClient(timeout=30) as client:
        _, streamed, _ = await _stream(client, f"{url}/v1/complete", token, 9)
        assert streamed.status_code == 200
        failed = await client.post(f"{url}/v1/count", content=b"{", headers=bearer(token))
        assert failed.status_code == 500  # the upstream fails: refund_on_5xx gives all back
    await read_with_trailers(
        f"{url}/v1/trailed", headers=bearer(token), body=json.dumps({"max_tokens": 4}).encode()
    )
    grant = _grant_id(token)
    shown = x402srv(usage_gateway, "challenges", "show", grant)
    assert shown.returncode == 0, shown.stderr
    calls = json.loads(shown.stdout)["credits"]["calls_charged_by_use"]
    assert [(c["route"], c["reserved"], c["charged"]) for c in calls] == [
        ("/v1/trailed", RESERVE, 4),
        ("/v1/count", RESERVE, 0),
        ("/v1/complete", RESERVE, 9),
        ("/v1/count", RESERVE, 7),
    ]
    assert calls[0]["at"] >= calls[-1]["at"]  # newest first, RFC 3339 times
    console = Console(usage_gateway, f"http://127.0.0.1:{admin_port}/admin")
    usage = console.ok(f"/purchases/{grant}")["usage"]
    assert [(c["route"], c["charged"]) for c in usage["usedCalls"]] == [
        (c["route"], c["charged"]) for c in calls
    ]
    (page,) = console_pages(console, f"/purchases/{grant}")
    assert 'id="used-calls"' in page and "/v1/trailed" in page


def _grant_id(token: str) -> str:
    """The grant a token opens: its ``jti``, the purchase's challengeId."""
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])
