"""A flood of unpaid challenges: limited per client, pruned by the sweep, paying buyers unharmed.

Four clients (four real source addresses on loopback, 127.0.0.2-5) ask a
two-worker server for 20,000 unpaid challenges between them, while a fifth
buys a plan with the official x402 client. What must hold (issue "trust", item
"unpaid traffic is bounded"):

- each flooding client gets its limit's worth of 402s, then 429 RATE_LIMITED
  with Retry-After, the count shared by both workers through the store;
- the paying buyer is never limited and gets its grant during the flood;
- a reconciler pass after the unpaid retention leaves only the paid record.

The figures (store size before and after the sweep, 429s, the buyer's latency
during the flood) are printed for the closing note.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.apps import KeptAlive
from tests.support.clock import until_clear_of_a_window_end
from tests.support.seller import Seller
from x402srv.access.reconciler import PassReport, Reconciler
from x402srv.cli import operations
from x402srv.config.models import load_config
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

FLOODERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
PER_FLOODER = 5_000
LIMIT = 500
#: A day: it ends mid-flood only at midnight UTC, which the tests wait out
#: (``until_clear_of_a_window_end``).
WINDOW = 86_400
WORKERS = 2
CONCURRENCY = 16
UNPAID_RETENTION_HOURS = 1


async def flood(url: str, source: str, challenges: list[str]) -> Counter[int]:
    """PER_FLOODER unpaid challenge requests from ``source``; the status codes seen.

    The challengeId of every 402 goes into ``challenges``.
    """
    statuses: Counter[int] = Counter()
    remaining = iter(range(PER_FLOODER))
    path = "/" + url.removeprefix("http://").split("/", 1)[1]

    async def worker() -> None:
        # (one kept-alive connection each, as httpx's pool would keep, at a fraction of
        # its CPU: the flood measures the server, not the client)
        async with KeptAlive(url, local_address=source) as client:
            for _ in remaining:
                response = await asyncio.wait_for(client.post_json(path, {"planId": "hourly"}), 30)
                statuses[response.status] += 1
                if response.status == 402:
                    challenges.append(json.loads(response.body)["challengeId"])
                if response.status == 429:
                    assert json.loads(response.body)["code"] == "RATE_LIMITED"
                    assert int(response.headers["retry-after"]) > 0

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return statuses


def stored_ids(seller: Seller) -> set[str]:
    with sqlite3.connect(seller.server.directory / "x402srv.db") as db:
        return {row[0] for row in db.execute("SELECT challenge_id FROM challenges")}


def rows(seller: Seller) -> int:
    return len(stored_ids(seller))


async def sweep_later(seller: Seller, retentions: int) -> PassReport:
    """One reconciler pass as it would run once ``retentions`` unpaid retentions have passed.

    The first expires the flood's challenges (a PENDING record is never pruned as it is:
    docs/operations.md), the second prunes them.
    """
    config = load_config(seller.server.config_path, env={**os.environ, **seller.server.env})
    later = time.time() + retentions * (UNPAID_RETENTION_HOURS * 3600 + 60)
    async with operations.opened(config, clock=lambda: later) as pipeline:
        return await Reconciler(pipeline, config.reconciler).run_once()


async def test_unpaid_flood_is_limited_per_client_and_swept_while_a_buyer_pays(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    seller = start_seller(
        "gas-wallet",
        workers=WORKERS,
        rate_limit={"unpaid_requests": LIMIT, "window_seconds": WINDOW},
        reconciler={"unpaid_retention_hours": UNPAID_RETENTION_HOURS},
        server={"challenge_ttl_seconds": 600},
    )
    before = rows(seller)
    await asyncio.sleep(until_clear_of_a_window_end(WINDOW, needed=120))  # (a flood: ~20 s)

    async def pay_during_flood() -> tuple[httpx.Response, float]:
        await asyncio.sleep(0.5)  # (only so that the purchase lands inside the flood)
        http, _ = paying_client(buyer)
        async with http:
            started = time.perf_counter()
            response = await http.post(seller.access_url, json={"planId": "hourly"})
            return response, time.perf_counter() - started

    challenges: list[str] = []
    started = time.perf_counter()
    floods, (paid, latency) = await asyncio.gather(
        asyncio.gather(*(flood(seller.access_url, source, challenges) for source in FLOODERS)),
        pay_during_flood(),
    )
    elapsed = time.perf_counter() - started
    assert paid.status_code == 200, paid.text

    # what the other worker may admit before it adds its count (docs/operations.md)
    sync_slack = (WORKERS - 1) * (LIMIT // 20)
    for statuses in floods:
        assert set(statuses) == {402, 429}, statuses
        assert LIMIT <= statuses[402] <= LIMIT + sync_slack, statuses
        assert statuses[429] == PER_FLOODER - statuses[402]

    ids = stored_ids(seller)
    stored = len(ids)
    assert len(set(challenges)) == len(challenges), "a challengeId was answered twice"
    not_stored = [c for c in challenges if c not in ids]
    assert not not_stored, f"402s whose challenge is not in the store: {not_stored[:5]}"
    assert stored - before == len(challenges) + 1  # + the paid one
    expired = await sweep_later(seller, 1)
    assert len(expired.changes) == len(challenges)
    report = await sweep_later(seller, 2)
    after = rows(seller)
    assert after == 1, "only the paid record is left"
    assert report.pruned == stored - after
    print(
        f"\nunpaid flood: {len(FLOODERS) * PER_FLOODER} requests from {len(FLOODERS)} clients "
        f"in {elapsed:.1f} s ({WORKERS} workers, limit {LIMIT}); "
        f"402s {[s[402] for s in floods]}, 429s {sum(s[429] for s in floods)}; "
        f"store {stored} records before the sweep, {after} after; "
        f"the paying buyer's purchase took {latency * 1000:.0f} ms during the flood"
    )


def test_limit_counts_discovery_and_challenges_never_payments_and_keys_by_the_proxys_hop(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """Three unpaid requests per client; the fourth is 429, a payment still goes through.

    This test plays the proxy that sets ``X-Real-IP`` (one trusted hop).
    """
    seller = start_seller(
        "gas-wallet",
        rate_limit={
            "unpaid_requests": 3,
            "window_seconds": WINDOW,
            "client_ip_header": "X-Real-IP",
            "trusted_hops": 1,
        },
    )
    time.sleep(until_clear_of_a_window_end(WINDOW))
    alice = {"X-Real-IP": "10.0.0.1, 198.51.100.7"}  # the right-most hop counts
    assert httpx.post(seller.access_url, json={}, headers=alice).status_code == 402
    challenge = httpx.post(seller.access_url, json={"planId": "hourly"}, headers=alice)
    assert challenge.status_code == 402
    assert httpx.post(seller.access_url, json={"planId": "daily"}, headers=alice).status_code == 402
    limited = httpx.post(seller.access_url, json={}, headers=alice)
    assert limited.status_code == 429, limited.text
    assert limited.json()["code"] == "RATE_LIMITED"
    assert int(limited.headers["retry-after"]) > 0
    # another client (another hop) is counted on its own
    bob = {"X-Real-IP": "198.51.100.8"}
    assert httpx.post(seller.access_url, json={}, headers=bob).status_code == 402

    # a request that carries a payment is never limited, even from a limited client
    payment = signed_payment(buyer, seller.chain.token, challenge.json()["accepts"][0])
    paid = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={**alice, "PAYMENT-SIGNATURE": encode_payment(payment)},
    )
    assert paid.status_code == 200, paid.text
    again = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={**alice, "PAYMENT-SIGNATURE": encode_payment(payment)},
    )
    assert again.json() == paid.json()
