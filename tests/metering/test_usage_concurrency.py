"""Reservations count against the balance: 200 calls charged by use never spend more than it.

As ``test_concurrency.py`` does for fixed costs, on real servers: x402srv with two
workers (and a second instance on Redis), the sample "LLM" upstream reporting
each call's cost in a header. Each call reserves 5 of a 50-credit grant and
uses 1 to 5; whatever interleaving, the charges add up to no more than 50 and
the balance left is exactly 50 minus them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.credentials import bearer
from tests.support.metering import limits
from tests.support.seller import Seller
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

CALLS = 200
PLAN = {"plan_id": "tokens-50", "unit_amount": "$0.05", "description": "50 tokens", "calls": 50}


def _store(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    url: str = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": url, "redis": {"key_prefix": f"use-{id(request)}:"}}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_200_reservations_at_once_never_spend_more_than_the_balance(
    start_seller: Callable[..., Seller],
    llm_upstream: AppProcess,
    buyer: LocalAccount,
    request: pytest.FixtureRequest,
    backend: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    route = {
        "prefix": "/v1/count",
        "upstream": llm_upstream.url,
        "plans": ["tokens-50"],
        "cost": {"reserve": 5, "from": "header"},
    }
    seller = start_seller(
        "gas-wallet", workers=2, plans=[PLAN], routes=[route], store=_store(backend, request)
    )
    servers = [seller.server]
    if backend != "sqlite":  # a second instance on the same Redis
        twin = ServerProcess(
            seller.config, tmp_path_factory.mktemp("twin"), workers=2, env=seller.server.env
        ).start()
        servers.append(twin)
    try:
        http, _ = paying_client(buyer)
        async with http:
            bought = await http.post(seller.access_url, json={"planId": "tokens-50"})
        assert bought.status_code == 200, bought.text
        token = bought.json()["accessToken"]
        async with httpx.AsyncClient(
            timeout=60, limits=httpx.Limits(max_connections=100)
        ) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        f"{servers[i % len(servers)].url}/v1/count",
                        json={"max_tokens": 1 + i % 5},
                        headers=bearer(token),
                    )
                    for i in range(CALLS)
                )
            )
            statuses = Counter(a.status_code for a in answers)
            charged = sum(int(a.headers["x-x402-cost"]) for a in answers if a.status_code == 200)
            assert all(
                a.json()["code"] == "CREDITS_EXHAUSTED" for a in answers if a.status_code == 402
            )
            assert set(statuses) <= {200, 402}
            await asyncio.sleep(0.2)
            last = await client.post(
                f"{servers[0].url}/v1/count", json={"max_tokens": 1}, headers=bearer(token)
            )
        left = (
            limits(last.headers["ratelimit"])["credits"]["r"] + int(last.headers["x-x402-cost"])
            if last.status_code == 200
            else last.json()["balance"]
        )
        print(
            f"\n[{backend}, {len(servers)} instance(s) x 2 workers] {CALLS} concurrent calls "
            f"reserving 5 against 50 credits: {statuses[200]} ran, {statuses[402]} refused, "
            f"{charged} charged, {left} left"
        )
        assert charged <= 50
        assert left == 50 - charged
        assert statuses[200] >= 10  # at least the reservations the balance holds at once
    finally:
        for server in servers[1:]:
            server.stop()
