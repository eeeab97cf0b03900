"""No over-spend under concurrency, on real servers: 200 calls at once against 50 credits.

The gateway runs with two worker processes (two instances for Redis and
PostgreSQL: two servers sharing one store), and the calls go to all of them at
once, so the spends race across processes, not just inside one event loop.
Exactly 50 may pass.
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
from tests.support.metering import PLANS, limits, metering_routes
from tests.support.seller import Seller
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

CALLS = 200


def _store(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    if backend == "postgres":
        table: dict[str, Any] = request.getfixturevalue("postgres_store_table")
        return table
    url: str = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": url, "redis": {"key_prefix": f"race-{id(request)}:"}}


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
async def test_200_calls_at_once_against_50_credits_let_exactly_50_through(
    start_seller: Callable[..., Seller],
    echo_upstream: AppProcess,
    buyer: LocalAccount,
    request: pytest.FixtureRequest,
    backend: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    seller = start_seller(
        "gas-wallet",
        workers=2,
        plans=PLANS,
        routes=metering_routes(echo_upstream.url),
        store=_store(backend, request),
    )
    servers = [seller.server]
    if backend != "sqlite":  # a second instance on the same Redis / PostgreSQL
        twin = ServerProcess(
            seller.config, tmp_path_factory.mktemp("twin"), workers=2, env=seller.server.env
        ).start()
        servers.append(twin)
    try:
        http, _ = paying_client(buyer)
        async with http:
            bought = await http.post(seller.access_url, json={"planId": "calls-50"})
        assert bought.status_code == 200, bought.text
        token = bought.json()["accessToken"]
        limits_ = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(timeout=60, limits=limits_) as client:
            answers = await asyncio.gather(
                *(
                    client.get(f"{servers[i % len(servers)].url}/bulk/{i}", headers=bearer(token))
                    for i in range(CALLS)
                )
            )
        statuses = Counter(answer.status_code for answer in answers)
        left = sorted(
            limits(a.headers["ratelimit"])["credits"]["r"] for a in answers if a.status_code == 200
        )
        print(
            f"\n[{backend}, {len(servers)} instance(s) x 2 workers] {CALLS} concurrent calls "
            f"against 50 credits: {statuses[200]} answered 200, {statuses[402]} answered 402 "
            f"CREDITS_EXHAUSTED, other {sum(statuses.values()) - statuses[200] - statuses[402]}"
        )
        others = Counter(
            f"{a.status_code} {a.json().get('code')}: {a.json().get('detail')}"
            for a in answers
            if a.status_code not in (200, 402)
        )
        assert statuses == {200: 50, 402: 150}, others
        assert left == list(range(50))  # each credit taken exactly once
        assert all(a.json()["code"] == "CREDITS_EXHAUSTED" for a in answers if a.status_code == 402)
    finally:
        for server in servers[1:]:
            server.stop()
