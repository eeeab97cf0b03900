"""Refunds on anvil: through the official SDK facilitator and the gas wallet, and killed.

Money facts are counted from the token's Transfer events: refund transfers
equal refund records, and the buyer's balance moves by exactly the refunded
amounts. The kill test SIGKILLs the ``x402srv refunds create`` process at each
refund failpoint (``x402srv.access.failpoints``; ``after-broadcast`` is the gas
wallet's), then a fresh ``x402srv reconcile`` finishes the refund: exactly one
transfer per refund, on sqlite, Redis and PostgreSQL. The kill is the only
thing injected.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.cli import x402srv
from tests.support.problems import assert_problem
from tests.support.purchase import HOURLY, buy
from tests.support.seller import Seller, settlement_table
from x402srv.devchain import Devchain

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

REFUND_KEY_ENV = "X402SRV_TEST_REFUND_KEY"
#: Where a refund can die: claimed and signed, broadcast (gas wallet), sent but not recorded.
REFUND_POINTS = ("refund-after-claim", "after-broadcast", "refund-after-send")
#: Purchases refunded per failpoint and store.
ROUNDS = 2


def refunding_seller(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    strategy: str,
    store: dict[str, Any] | None = None,
    gas_wallet: dict[str, Any] | None = None,
) -> tuple[Seller, LocalAccount]:
    """A seller whose refund wallet holds tokens but no ETH (the settlers pay the gas).

    ``gas_wallet``: ``[settlement.gas-wallet]`` options, with a SETTLING lease long
    enough for them (the gas-wallet strategy).
    """
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    env = {REFUND_KEY_ENV: "0x" + bytes(wallet.key).hex()}
    extra: dict[str, Any] = {"store": store} if store else {}
    if gas_wallet is not None:
        table = settlement_table(strategy, devchain, None, env)
        extra["settlement"] = {**table, "lease_seconds": 300, "gas-wallet": gas_wallet}
    seller = start_seller(
        strategy,
        env=env,
        refunds={"private_key": {"env": REFUND_KEY_ENV}, "low_balance": 20 * HOURLY},
        **extra,
    )
    return seller, wallet


def refund(seller: Seller, purchase_id: str, *args: str, env: dict[str, str] | None = None) -> Any:
    target = seller.server.env
    assert isinstance(target, dict)  # (the process's own env, changed for this one command)
    saved = dict(target)
    target.update(env or {})
    try:
        return x402srv(seller, "refunds", "create", purchase_id, "--reason", "test", *args)
    finally:
        target.clear()
        target.update(saved)


async def test_a_full_refund_with_keep_grant_leaves_the_grant_standing(
    start_seller: Callable[..., Seller], devchain: Devchain
) -> None:
    seller, _ = refunding_seller(start_seller, devchain, "facilitator")
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    grant = await buy(seller, buyer)
    kept = refund(seller, grant["challengeId"], "--keep-grant")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["refund"]["state"] == "REFUNDED"
    replay = httpx.post(
        seller.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
    )
    assert replay.status_code == 200, replay.text


async def test_a_kill_before_a_full_refund_is_marked_leaves_no_grant_standing(
    start_seller: Callable[..., Seller], devchain: Devchain
) -> None:
    """The grant is revoked before the refund is marked REFUNDED, never after.

    Revoking after the mark left a refunded grant standing when the process died
    between the two: later passes do not look at finished refunds.
    """
    seller, _ = refunding_seller(start_seller, devchain, "gas-wallet")
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    grant = await buy(seller, buyer)
    killed = refund(seller, grant["challengeId"], env={"X402SRV_FAILPOINT": "refund-transfer-seen"})
    assert killed.returncode == -9, killed.stderr
    reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    listed = x402srv(seller, "refunds", "list", "--purchase", grant["challengeId"])
    assert listed.stdout.count("REFUNDED") == 1, listed.stdout
    sales = x402srv(seller, "export-sales", "--from", "0", "--format", "jsonl")
    rows = [json.loads(line) for line in sales.stdout.splitlines()]
    purchase = [r for r in rows if r["status"] != "refund"]
    assert [r["status"] for r in purchase] == ["revoked"], rows  # its tokens are refused
    assert devchain.balance_of(buyer.address) == HOURLY  # paid back once


@pytest.mark.parametrize("strategy", ["facilitator", "gas-wallet"])
async def test_refunds_reach_the_buyer_once_and_never_past_what_was_paid(
    start_seller: Callable[..., Seller], devchain: Devchain, strategy: str
) -> None:
    seller, wallet = refunding_seller(start_seller, devchain, strategy)
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start_block = devchain.rpc.block_number() + 1
    grant = await buy(seller, buyer)
    after_purchase = devchain.balance_of(buyer.address)

    first = refund(seller, grant["challengeId"], "--amount", "40000")
    assert first.returncode == 0, first.stderr
    shown = json.loads(first.stdout)
    assert shown["refund"]["state"] == "REFUNDED", shown
    assert (shown["paid"], shown["refunded"], shown["left"]) == ("100000", "40000", "60000")
    over = refund(seller, grant["challengeId"], "--amount", "60001")
    assert over.returncode == 1
    assert "only 60000 is left" in over.stderr
    rest = refund(seller, grant["challengeId"])  # the rest, whatever is left
    assert rest.returncode == 0, rest.stderr
    assert json.loads(rest.stdout)["left"] == "0"
    assert refund(seller, grant["challengeId"]).returncode == 1  # nothing left

    # Everything went back: the grant is revoked, and its buyer is told why, with the txHash.
    replay = httpx.post(
        seller.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
    )
    problem = assert_problem(replay, 410, "GRANT_REFUNDED")
    assert problem["txHash"] == json.loads(rest.stdout)["refund"]["tx_hash"]
    assert [r["amount"] for r in problem["refunds"]] == ["40000", "60000"]

    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [t.value for t in transfers] == [40_000, 60_000]
    assert all(t.to.lower() == buyer.address.lower() for t in transfers)
    assert devchain.balance_of(buyer.address) == after_purchase + HOURLY
    listed = x402srv(seller, "refunds", "list", "--purchase", grant["challengeId"])
    assert listed.stdout.count("REFUNDED") == 2
    tx_hashes = {t.tx_hash.lower() for t in transfers}
    assert {line.split()[-1] for line in listed.stdout.splitlines()} == tx_hashes

    sales = x402srv(seller, "export-sales", "--from", "0", "--format", "jsonl")
    assert sales.returncode == 0, sales.stderr
    rows = [json.loads(line) for line in sales.stdout.splitlines()]
    assert [(r["status"], r["amount"]) for r in rows] == [
        ("revoked", "100000"),
        ("refund", "-40000"),
        ("refund", "-60000"),
    ]
    assert {r["challengeId"] for r in rows} == {grant["challengeId"]}  # linked to the purchase
    assert {r["txHash"] for r in rows[1:]} == tx_hashes
    assert sum(int(r["amount"]) for r in rows) == 0

    ready = httpx.get(f"{seller.server.url}/readyz").json()
    assert ready["status"] == "ready"
    assert ready["refund_wallets"] == [
        {
            "network": devchain.network,
            "asset": devchain.token.address,
            "address": wallet.address,
            "balance": str(9 * HOURLY),
            "low": True,
        }
    ]
    assert ready["warnings"] == [
        f"refund wallet {wallet.address} on {devchain.network} holds less than "
        f"refunds.low_balance of {devchain.token.address}"
    ]
    checked = x402srv(seller, "check")
    assert wallet.address in checked.stdout
    assert f"refund wallet {wallet.address}" in checked.stderr
    assert "holds less than refunds.low_balance" in checked.stderr  # 10 hours < 20 hours


#: A nonce lease no purchase in these tests could wait out (their buyer gives up after 30 s).
LONG_NONCE_LEASE = 60


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
async def test_a_refund_killed_holding_the_nonce_lease_does_not_hold_up_the_next_purchase(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    """``x402srv refunds create`` killed right after broadcasting dies holding the gas
    wallet's nonce lease. The seller's process sees that the refund's process is gone
    and takes the lease over once it is the RPC timeout (1 s here) old, instead of
    keeping a paid buyer waiting for ``nonce_lease_seconds``; the refund it had sent
    still ends exactly once."""
    seller, wallet = refunding_seller(
        start_seller,
        devchain,
        "gas-wallet",
        store_for(backend, request),
        # (a dead holder's lease is taken over once it is the RPC timeout old)
        gas_wallet={"nonce_lease_seconds": LONG_NONCE_LEASE, "rpc_timeout_seconds": 1},
    )
    refunded = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    grant = await buy(seller, refunded)
    start_block = devchain.rpc.block_number() + 1
    killed = refund(seller, grant["challengeId"], env={"X402SRV_FAILPOINT": "after-broadcast"})
    assert killed.returncode == -9, killed.stderr

    started = time.monotonic()
    await buy(seller, devchain.new_account(eth=0, usdc_atomic=HOURLY))
    waited = time.monotonic() - started
    print(f"purchase after a killed refund, {backend}: {waited:.2f} s")

    assert waited < LONG_NONCE_LEASE / 2, waited
    assert "taken over from" in seller.server.logs()  # the killed refund held it
    reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    listed = x402srv(seller, "refunds", "list", "--purchase", grant["challengeId"])
    assert listed.stdout.count("REFUNDED") == 1, listed.stdout
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [(t.to.lower(), t.value) for t in transfers] == [(refunded.address.lower(), HOURLY)]


def store_for(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    if backend == "redis":
        return {
            "backend": "redis",
            "url": request.getfixturevalue("redis_url"),
            "redis": {"key_prefix": f"refunds-{id(request)}:"},
        }
    table: dict[str, Any] = request.getfixturevalue("postgres_store_table")
    return table


FIGURES: dict[str, dict[str, float]] = {}


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
async def test_kill_during_refunds_gives_exactly_one_transfer_per_refund(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    seller, wallet = refunding_seller(
        start_seller, devchain, "gas-wallet", store_for(backend, request)
    )
    start_block = devchain.rpc.block_number() + 1
    figures = {"rounds": 0, "kills": 0, "refunds": 0, "transfers": 0, "slowest": 0.0}
    refunded: dict[str, int] = {}
    for point in REFUND_POINTS:
        for _ in range(ROUNDS):
            buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
            grant = await buy(seller, buyer)
            figures["rounds"] += 1
            killed = refund(seller, grant["challengeId"], env={"X402SRV_FAILPOINT": point})
            assert killed.returncode == -9, (point, killed.stderr)
            figures["kills"] += 1
            figures["refunds"] += 1
            restarted = time.monotonic()
            reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
            assert reconciled.returncode == 0, reconciled.stderr
            listed = x402srv(seller, "refunds", "list", "--purchase", grant["challengeId"])
            assert listed.stdout.count("REFUNDED") == 1, (point, listed.stdout)
            figures["slowest"] = max(figures["slowest"], time.monotonic() - restarted)
            again = x402srv(seller, "reconcile", "--grace-seconds", "0")  # changes nothing
            assert again.returncode == 0, again.stderr
            refunded[buyer.address.lower()] = HOURLY
            assert devchain.balance_of(buyer.address) == HOURLY
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start_block)
    figures["transfers"] = len(transfers)
    assert len(transfers) == figures["refunds"]
    assert {t.to.lower(): t.value for t in transfers} == refunded
    print(f"kill-during-refunds {backend}: {figures}")
