"""SIGKILL a real server in the middle of a burst of purchases, restart it, retry once.

The promise under test (docs/protocol/states.md): a buyer whose transfer reached the chain gets
its grant on its FIRST retry after the restart, with no operator step (no
``x402srv reconcile``) and whatever lease the dead process left behind. Every
round kills the server at a random moment (seeded, so a failure replays)
while its buyers pay at once with the gas wallet, on sqlite, Redis and PostgreSQL.

Buyers whose transfer did not happen are not owed anything yet; the test only
checks that nothing was granted without a transfer and that no payment moved
twice. The figures of each run (rounds, kills, purchases, transfers, grants, the
longest time from restart to grant, the slowest single paid retry) are printed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.seller import Seller
from x402srv.devchain import Devchain

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

SEED = 13
ROUNDS = 3
BUYERS = 12
HOURLY = 100_000
#: Kill times, as fractions of how long an uninterrupted burst takes on this machine.
KILL_WINDOW = (0.15, 0.85)


@dataclass
class Purchase:
    buyer: LocalAccount
    body: dict[str, Any]
    header: str
    nonce: str
    answer: int | None = None  # the burst's answer, if the server gave one before dying


def prepare(seller: Seller, devchain: Devchain) -> list[Purchase]:
    purchases = []
    for _ in range(BUYERS):
        buyer = devchain.new_account()
        payment = seller.pay_with(buyer, "hourly")
        body = {"planId": "hourly", "requestId": payment.request_id}
        nonce = payment.nonce
        purchases.append(Purchase(buyer, body, payment.header, nonce))
    return purchases


def post(seller: Seller, purchase: Purchase) -> httpx.Response:
    return httpx.post(
        seller.access_url,
        json=purchase.body,
        headers={"PAYMENT-SIGNATURE": purchase.header},
        timeout=30,
    )


def burst(seller: Seller, purchases: list[Purchase], kill_after: float | None = None) -> float:
    """Every purchase at once; SIGKILL the server ``kill_after`` seconds in. Returns seconds."""

    def pay(purchase: Purchase) -> None:
        try:
            purchase.answer = post(seller, purchase).status_code
        except httpx.TransportError:
            purchase.answer = None  # the server died under it

    threads = [threading.Thread(target=pay, args=(p,)) for p in purchases]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    if kill_after is not None:
        time.sleep(kill_after)  # the crash itself is the only thing timed here
        seller.server.kill()
    for thread in threads:
        thread.join(60)
    return time.monotonic() - started


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
def test_every_paid_buyers_first_retry_after_a_kill_gets_its_grant(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    store: dict[str, Any] = {"backend": "sqlite", "path": "x402srv.db"}
    if backend == "redis":
        store = {
            "backend": "redis",
            "url": request.getfixturevalue("redis_url"),
            "redis": {"key_prefix": f"burst-{id(request)}:"},
        }
    if backend == "postgres":  # a fresh, migrated schema on the session's cluster
        store = request.getfixturevalue("postgres_store_table")
    seller = start_seller("gas-wallet", store=store)
    rng = random.Random(f"{SEED}-{backend}")
    totals = {"rounds": 0, "paid": 0, "grants": 0, "unpaid": 0, "died_mid_request": 0}
    slowest = slowest_retry = 0.0
    # One burst without a kill says how long a burst takes here, so kills land inside one.
    calibration = prepare(seller, devchain)
    duration = burst(seller, calibration)
    assert all(p.answer == 200 for p in calibration)
    start_block = devchain.rpc.block_number() + 1  # the calibration's transfers are before
    start_balance = seller.balance()
    for _ in range(ROUNDS):
        purchases = prepare(seller, devchain)
        burst(seller, purchases, kill_after=rng.uniform(*KILL_WINDOW) * duration)
        totals["died_mid_request"] += sum(p.answer is None for p in purchases)
        seller.server.start()
        restarted = time.monotonic()
        for purchase in purchases:
            paid = devchain.authorization_state(purchase.buyer.address, purchase.nonce)
            sent = time.monotonic()
            retry = post(seller, purchase)
            if paid:
                assert retry.status_code == 200, (backend, retry.text)
                slowest = max(slowest, time.monotonic() - restarted)
                slowest_retry = max(slowest_retry, time.monotonic() - sent)
            if retry.status_code == 200:
                grant = retry.json()
                assert grant["requestId"] == purchase.body["requestId"]
                receipt = devchain.rpc.wait_for_receipt(grant["txHash"])
                assert receipt.status == 1
                assert devchain.authorization_state(purchase.buyer.address, purchase.nonce)
                totals["grants"] += 1
            else:
                assert retry.status_code in (402, 409, 502), retry.text
                assert not devchain.authorization_state(purchase.buyer.address, purchase.nonce)
                totals["unpaid"] += 1
            totals["paid"] += int(paid)
        totals["rounds"] += 1
    transfers = devchain.transfer_logs(to=seller.wallet, from_block=start_block)
    assert len(transfers) == totals["grants"], "every transfer has exactly one grant"
    assert seller.balance() - start_balance == HOURLY * totals["grants"], "none moved twice"
    print(
        f"\nkill-during-burst [{backend}]: {totals['rounds']} rounds, {totals['rounds']} kills, "
        f"{totals['died_mid_request']} requests cut off, {totals['paid']} paid before the retry, "
        f"{len(transfers)} transfers, {totals['grants']} grants, {totals['unpaid']} not paid yet; "
        f"longest restart-to-grant {slowest * 1000:.0f} ms (the retries go one after another), "
        f"slowest single paid retry {slowest_retry * 1000:.0f} ms"
    )
