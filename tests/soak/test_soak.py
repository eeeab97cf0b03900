"""A bounded soak: mixed valid and hostile traffic against one real server.

``X402SRV_SOAK_SECONDS`` (default 20 in the suite; set it to 600 or more for a
real soak) of eight concurrent clients doing, at
random: real purchases with the official x402 client, challenges, discovery,
garbage bodies and headers, and attacks on live challenges. Afterwards: no
500 at all, every grant has its transfer on-chain and vice versa, and the
server's resident memory did not run away. The figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

pytestmark = pytest.mark.soak

SECONDS = float(os.environ.get("X402SRV_SOAK_SECONDS", "20"))
CLIENTS = 8


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Traffic:
    def __init__(self, seller: Seller, buyers: list[LocalAccount]) -> None:
        self.seller = seller
        self.buyers = buyers
        self.statuses: Counter[int] = Counter()
        self.kinds: Counter[str] = Counter()
        self.grants: list[dict[str, Any]] = []
        self.failures: list[str] = []

    def record(self, kind: str, response: httpx.Response) -> None:
        self.kinds[kind] += 1
        self.statuses[response.status_code] += 1
        if response.status_code >= 500 and response.status_code != 502:
            self.failures.append(f"{kind}: {response.status_code} {response.text[:200]}")

    async def purchase(self, http: httpx.AsyncClient) -> None:
        buyer = random.choice(self.buyers)
        paying, _ = paying_client(buyer)
        async with paying:
            response = await paying.post(self.seller.access_url, json={"planId": "hourly"})
        self.record("purchase", response)
        if response.status_code == 200:
            self.grants.append(response.json())

    async def garbage(self, http: httpx.AsyncClient) -> None:
        choice = random.randrange(6)
        url = self.seller.access_url
        if choice == 0:
            response = await http.post(url, content=os.urandom(random.randrange(1, 2000)))
        elif choice == 1:
            response = await http.post(
                url,
                json={"planId": "hourly"},
                headers={"PAYMENT-SIGNATURE": base64.b64encode(os.urandom(300)).decode()},
            )
        elif choice == 2:
            response = await http.post(
                url, content=b"[" * 60_000, headers={"content-type": "application/json"}
            )
        elif choice == 3:
            response = await http.post(url, json={"planId": "nope", "requestId": "x"})
        elif choice == 4:
            response = await http.post(url, json={"planId": "hourly", "pad": "x" * 70_000})
        else:
            response = await http.get(url)
        self.record("garbage", response)

    async def attack(self, http: httpx.AsyncClient) -> None:
        """A signed payment for a live challenge, with one thing wrong."""
        challenge = (await http.post(self.seller.access_url, json={"planId": "hourly"})).json()
        accepted = challenge["accepts"][0]
        buyer = random.choice(self.buyers)
        payment = signed_payment(
            buyer, self.seller.chain.token, accepted, value=int(accepted["amount"]) - 1
        )
        if random.random() < 0.5:
            payment = signed_payment(
                buyer, self.seller.chain.token, accepted, to=Account.create().address
            )
        response = await http.post(
            self.seller.access_url,
            json={"planId": "hourly"},
            headers={"PAYMENT-SIGNATURE": encode_payment(payment)},
        )
        self.record("attack", response)

    async def challenge(self, http: httpx.AsyncClient) -> None:
        body = {"planId": random.choice(["hourly", "daily"])} if random.random() < 0.8 else {}
        self.record("challenge", await http.post(self.seller.access_url, json=body))

    async def client(self, deadline: float) -> None:
        actions: list[tuple[float, Callable[[httpx.AsyncClient], Awaitable[None]]]] = [
            (0.15, self.purchase),
            (0.25, self.challenge),
            (0.45, self.garbage),
            (0.15, self.attack),
        ]
        weights = [w for w, _ in actions]
        async with httpx.AsyncClient(timeout=60) as http:
            while time.monotonic() < deadline:
                ((_, action),) = random.choices(actions, weights)
                await action(http)


async def test_soak(start_seller: Callable[..., Seller], devchain: Devchain) -> None:
    # Eight simulated clients share one address here: the unpaid-request limit would
    # turn most of their traffic into 429s (tests/e2e/test_unpaid_flood.py tests it).
    seller = start_seller("gas-wallet", rate_limit={"unpaid_requests": 10_000_000})
    buyers = [devchain.new_account(usdc_atomic=1_000_000_000) for _ in range(CLIENTS * 2)]
    traffic = Traffic(seller, buyers)
    pid = seller.server.process.pid if seller.server.process else 0
    warm_deadline = time.monotonic() + 3
    await asyncio.gather(*(traffic.client(warm_deadline) for _ in range(CLIENTS)))
    rss_before = rss_kib(pid)
    warm = sum(traffic.kinds.values())

    started = time.monotonic()
    await asyncio.gather(*(traffic.client(started + SECONDS) for _ in range(CLIENTS)))
    elapsed = time.monotonic() - started
    rss_after = rss_kib(pid)

    total = sum(traffic.kinds.values()) - warm
    transfers = seller.chain.transfer_logs(to=seller.wallet)
    print(
        f"\nsoak: {elapsed:.0f} s, {total} requests ({total / elapsed:.0f}/s), {warm} warm-up; "
        f"kinds {dict(traffic.kinds)}; statuses {dict(sorted(traffic.statuses.items()))}; "
        f"500s {traffic.statuses[500]}; grants {len(traffic.grants)}, transfers {len(transfers)}; "
        f"RSS {rss_before} KiB -> {rss_after} KiB"
    )
    assert traffic.statuses[500] == 0
    assert not traffic.failures, traffic.failures[:5]
    assert seller.server.process is not None and seller.server.process.poll() is None
    assert sorted(g["txHash"] for g in traffic.grants) == sorted(
        t.tx_hash.lower() for t in transfers
    )
    assert rss_after < rss_before * 1.5 + 30 * 1024, "resident memory keeps growing"
    assert "Traceback" not in seller.server.logs()
    print(json.dumps({"rss_before_kib": rss_before, "rss_after_kib": rss_after}))
