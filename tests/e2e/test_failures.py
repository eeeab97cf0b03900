"""The failure rows of the error table, each from a real request to a real server.

402 from settlement (nothing moved, the challenge PENDING again), 500 when the issuer
fails after payment (the record stays PAID; the retry delivers), and 503 when
the store cannot be reached (nothing settled).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.faults import issuer_failing_once, lockable_store, locked
from tests.support.problems import assert_problem
from tests.support.seller import Seller
from x402srv.devchain import Devchain

HOURLY = 100_000


def test_settlement_refused_releases_the_claim(seller: Seller, devchain: Devchain) -> None:
    """An unfunded buyer: 402 with the settler's reason; the same challenge can be paid later."""
    broke = devchain.new_account(usdc_atomic=0)
    payment = seller.pay_with(broke, "hourly")
    block = devchain.rpc.block_number()
    refused = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": payment.header},
    )
    problem = assert_problem(refused, 402, "PAYMENT_FAILED")
    assert problem["reason"] == "invalid_exact_evm_insufficient_balance"
    assert devchain.rpc.block_number() == block

    devchain.mint(broke.address, HOURLY)
    retried = httpx.post(
        seller.access_url,
        json={"planId": "hourly"},
        headers={"PAYMENT-SIGNATURE": payment.header},
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["challengeId"] == payment.challenge_id


@pytest.fixture(scope="module")
def callback_seller(
    start_seller: Callable[..., Seller], tmp_path_factory: pytest.TempPathFactory
) -> Seller:
    return start_seller("facilitator", **issuer_failing_once(tmp_path_factory.mktemp("callbacks")))


def test_issuer_failure_after_payment_is_500_and_retry_delivers(
    callback_seller: Seller, buyer: LocalAccount
) -> None:
    seller = callback_seller
    payment = seller.pay_with(buyer, "hourly")
    header = payment.header
    before = seller.balance()

    failed = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    problem = assert_problem(failed, 500, "INTERNAL_ERROR")
    assert int(failed.headers["retry-after"]) >= 1
    assert problem["challengeId"] == payment.challenge_id
    assert seller.balance() - before == HOURLY  # paid, and the record stays PAID
    assert "seller backend unavailable" not in failed.text

    retried = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert retried.status_code == 200, retried.text
    grant = retried.json()
    assert grant["accessToken"] == f"api-key-{payment.challenge_id}"
    assert grant["tokenType"] == "ApiKey"
    assert grant["txHash"] == problem["txHash"]
    assert seller.balance() - before == HOURLY  # no second settlement


@pytest.fixture(scope="module")
def lockable_seller(start_seller: Callable[..., Seller]) -> Seller:
    return start_seller(
        "facilitator",
        store=lockable_store(),
    )


def test_store_unavailable_is_503_and_nothing_settles(
    lockable_seller: Seller, buyer: LocalAccount
) -> None:
    seller = lockable_seller
    header = seller.pay_with(buyer, "hourly").header
    block = seller.chain.rpc.block_number()
    with locked(seller.server.directory / "x402srv.db"):
        new = httpx.post(seller.access_url, json={"planId": "daily"})
        assert_problem(new, 503, "STORE_UNAVAILABLE")
        assert int(new.headers["retry-after"]) >= 1
        paying = httpx.post(
            seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
        )
        assert_problem(paying, 503, "STORE_UNAVAILABLE")
        assert "sqlite" not in paying.text.lower()
    assert seller.chain.rpc.block_number() == block  # nothing settled without a stored claim

    recovered = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert recovered.status_code == 200, recovered.text


def test_gas_wallet_receipt_timeout_is_502_then_the_retry_delivers(
    start_seller: Callable[..., Seller], devchain: Devchain, buyer: LocalAccount
) -> None:
    """A transaction not mined in time: 502; once it is mined, the retry gets the grant."""
    from tests.support.seller import GAS_KEY_ENV

    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    seller = start_seller(
        "gas-wallet",
        settlement={
            "strategy": "gas-wallet",
            "gas_wallet_private_key": {"env": GAS_KEY_ENV},
            "gas-wallet": {"receipt_timeout_seconds": 1},
        },
        env={GAS_KEY_ENV: "0x" + bytes(gas.key).hex()},
    )
    header = seller.pay_with(buyer, "hourly").header
    devchain.rpc.call("evm_setAutomine", [False])  # the transaction waits in the mempool
    try:
        pending = httpx.post(
            seller.access_url,
            json={"planId": "hourly"},
            headers={"PAYMENT-SIGNATURE": header},
            timeout=30,
        )
        assert_problem(pending, 502, "SETTLEMENT_PENDING")
        assert seller.balance() == 0
    finally:
        devchain.rpc.call("evm_setAutomine", [True])
    devchain.rpc.mine()
    retried = httpx.post(
        seller.access_url, json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
    )
    assert retried.status_code == 200, retried.text
    assert seller.balance() == HOURLY
    assert len(seller.chain.transfer_logs(to=seller.wallet)) == 1
