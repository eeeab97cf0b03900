"""Operator tools and the background reconciler, on real servers and real stores."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.cli import x402srv
from tests.support.clock import MovableClock
from tests.support.problems import assert_problem
from tests.support.seller import JWT_SECRET, Seller
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import State
from x402srv.config.models import parse_config
from x402srv.devchain import Devchain
from x402srv.server.app import create_app
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config


def test_background_reconciler_finishes_a_crashed_purchase(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """Killed after PAID; restarted; nobody runs anything: the server's own pass delivers."""
    seller = start_seller(
        "gas-wallet",
        env={"X402SRV_FAILPOINT": "after-paid"},
        reconciler={"interval_seconds": 1, "grace_seconds": 0},
    )
    payment = seller.pay_with(buyer, "hourly")
    header = payment.header
    with pytest.raises(httpx.TransportError):
        httpx.post(
            seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
        )
    seller.server.env = {k: v for k, v in seller.server.env.items() if k != "X402SRV_FAILPOINT"}
    seller.server.start()
    deadline = time.monotonic() + 15
    state = ""
    while time.monotonic() < deadline:
        shown = x402srv(seller, "challenges", "show", payment.challenge_id)
        state = json.loads(shown.stdout)["state"]
        if state == "DELIVERED":
            break
        time.sleep(0.5)
    assert state == "DELIVERED"
    assert "reconciled challenge" in seller.server.logs()


def test_challenges_list_show_cancel(seller: Seller, buyer: LocalAccount) -> None:
    pending = seller.challenge("hourly")
    listed = x402srv(seller, "challenges", "list", "--state", "PENDING", "--limit", "100000")
    assert listed.returncode == 0
    assert pending["challengeId"] in listed.stdout

    cancelled = x402srv(seller, "challenges", "cancel", pending["challengeId"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"cancelled {pending['challengeId']} (hourly): ")
    shown = json.loads(x402srv(seller, "challenges", "show", pending["challengeId"]).stdout)
    assert shown["state"] == "CANCELLED"
    header = encode_payment(signed_payment(buyer, seller.chain.token, pending["accepts"][0]))
    block = seller.chain.rpc.block_number()
    refused = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert_problem(refused, 410, "CHALLENGE_EXPIRED")
    assert seller.chain.rpc.block_number() == block

    again = x402srv(seller, "challenges", "cancel", pending["challengeId"])
    assert again.returncode == 1
    assert "already cancelled" in again.stderr
    missing = x402srv(seller, "challenges", "show", "no-such-challenge")
    assert missing.returncode == 1


def test_show_has_history_and_hides_token_and_signature(
    seller: Seller, buyer: LocalAccount
) -> None:
    payment = seller.pay_with(buyer, "hourly")
    paid = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": payment.header},
    )
    assert paid.status_code == 200
    shown = x402srv(seller, "challenges", "show", payment.challenge_id)
    record = json.loads(shown.stdout)
    states = [h["state"] for h in record["history"]]
    assert states[0] == "PENDING"
    assert states[-2:] == ["PAID", "DELIVERED"]
    assert set(states[1:-2]) == {"SETTLING"}
    reasons = [h["reason"] for h in record["history"]]
    assert f"handed to settler {seller.strategy}" in reasons
    if seller.strategy == "gas-wallet":
        assert "transaction broadcast" in reasons  # noted before it waits for the receipt
    else:
        # The facilitator answers once its transaction is mined: confirmed at the first
        # read, its txHash reaches the record with PAID, with no line of its own.
        assert "transaction broadcast" not in reasons
    assert record["tx_hash"] == paid.json()["txHash"]
    assert record["grant"]["accessToken"] == "<redacted>"
    assert record["payment"]["signature"] == "<redacted>"
    assert paid.json()["accessToken"] not in shown.stdout
    assert payment.document["payload"]["signature"] not in shown.stdout


def test_audit_reports_a_transfer_no_record_accounts_for(
    seller: Seller, devchain: Devchain
) -> None:
    """Someone sends the seller USDC directly: audit names it and exits non-zero."""
    start = devchain.rpc.block_number()
    stranger = devchain.new_account()
    from x402srv.devchain import encode_call

    devchain.rpc.send_transaction(
        stranger,
        to=devchain.token.address,
        data=encode_call("transfer(address,uint256)", seller.wallet, 5),
    )
    audited = x402srv(seller, "audit", "--from-block", str(start))
    assert audited.returncode == 1
    assert "UNMATCHED" in audited.stdout
    assert "no challenge accounts for it" in audited.stdout


async def test_reconciler_pass_expires_and_prunes(devchain: Devchain, tmp_path: Path) -> None:
    """Clock-injected: PENDING past expiresAt -> EXPIRED; finished records pruned later."""
    config = parse_config(
        seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=Account.create().address,
            store={"backend": "sqlite", "path": str(tmp_path / "x402srv.db")},
            settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
            credentials={"secret": JWT_SECRET},
        ),
        base_dir=tmp_path,
    )
    clock = MovableClock()
    app = create_app(config, clock=clock, name="reconciler_pass")
    _, offer = await app.asgi_client.post("/x402/access", json={"planId": "hourly"})
    challenge_id = offer.json["challengeId"]
    pipeline = app.ctx.pipeline
    await pipeline.store.start()
    try:
        reconciler = Reconciler(pipeline, config.reconciler)
        clock.advance(config.server.challenge_ttl_seconds + 1)
        report = await reconciler.run_once()
        assert [(c.challenge_id, c.after) for c in report.changes] == [
            (challenge_id, State.EXPIRED)
        ]
        assert report.pruned == 0
        clock.advance(config.reconciler.retention_days * 86_400)
        report = await reconciler.run_once()
        assert report.pruned == 1
        assert await pipeline.store.get_challenge(challenge_id) is None
    finally:
        await pipeline.store.close()


async def test_one_reconciler_at_a_time(devchain: Devchain, tmp_path: Path) -> None:
    """Two runners (two workers or instances) on one store: the lease lets one through."""
    config = parse_config(
        seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=Account.create().address,
            store={"backend": "sqlite", "path": str(tmp_path / "x402srv.db")},
            settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
            credentials={"secret": JWT_SECRET},
        ),
        base_dir=tmp_path,
    )
    app = create_app(config, name="one_reconciler")
    pipeline = app.ctx.pipeline
    await pipeline.store.start()
    try:
        first = Reconciler(pipeline, config.reconciler, holder="worker-1")
        second = Reconciler(pipeline, config.reconciler, holder="worker-2")
        held = await pipeline.store.acquire_lease(
            "x402srv-reconciler", "worker-1", 60, pipeline.clock()
        )
        assert held is not None
        assert await second.run_exclusive() is None
        assert await pipeline.store.release_lease(held, None)
        assert await second.run_exclusive() is not None
        assert await first.run_exclusive() is not None
    finally:
        await pipeline.store.close()
