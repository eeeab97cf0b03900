"""Settlements that go through: funds move, the txHash is right, nonces never collide."""

from __future__ import annotations

import asyncio
import logging

import pytest
from eth_account.signers.local import LocalAccount
from x402 import PaymentRequired, PaymentRequirements, ResourceInfo
from x402srv_gaswallet.testing import (
    PRICE,
    RecordingHooks,
    StartSettler,
    nonce_of,
    request_from,
    signed_request,
    tx_nonce,
)

from x402srv.chain import ChainReader
from x402srv.config import Config
from x402srv.devchain import Devchain, encode_call, sign_cancel_authorization
from x402srv.interfaces import Rejected, Settled
from x402srv.testing.buyers import official_client


async def test_settlement_moves_the_funds_and_returns_its_tx_hash(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(config)
    seller = config.seller.wallet_address
    hooks = RecordingHooks(chain_reader)
    before = devchain.balance_of(buyer.address)

    outcome = await settler.settle(signed_request(devchain, config, buyer), hooks)

    assert isinstance(outcome, Settled), outcome
    assert outcome.payer == buyer.address
    assert devchain.balance_of(seller) == PRICE
    assert devchain.balance_of(buyer.address) == before - PRICE
    (log,) = devchain.transfer_logs(to=seller)
    assert (log.tx_hash, log.from_address, log.value) == (outcome.tx_hash, buyer.address, PRICE)
    # The hash was handed to the pipeline once, before the node had the transaction.
    assert hooks.noted == [outcome.tx_hash]
    assert hooks.known_when_noted == [False]
    assert nonce_of(devchain, gas_account.address, "latest") == 1


async def test_payment_signed_by_the_official_x402_client_settles(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
) -> None:
    settler = await start_settler(config)
    requirements = PaymentRequirements(
        scheme="exact",
        network=devchain.network,
        asset=devchain.token.address,
        amount=str(PRICE),
        pay_to=config.seller.wallet_address,
        max_timeout_seconds=300,
        extra=devchain.token.eip712_extra,
    )
    payment = await official_client(buyer).create_payment_payload(
        PaymentRequired(accepts=[requirements], resource=ResourceInfo(url="https://s.example/x"))
    )
    wire = payment.model_dump(mode="json", by_alias=True)
    inner = wire["payload"]

    outcome = await settler.settle(
        request_from(config, inner["signature"], inner["authorization"]),
        RecordingHooks(chain_reader),
    )

    assert isinstance(outcome, Settled), outcome
    assert devchain.balance_of(config.seller.wallet_address) == PRICE
    assert devchain.authorization_state(buyer.address, inner["authorization"]["nonce"])


async def test_twenty_settlements_at_once_all_land_with_distinct_nonces(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    gas_account: LocalAccount,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settler = await start_settler(config)
    buyers = [devchain.new_account(eth=0) for _ in range(20)]
    requests = [
        signed_request(devchain, config, b, challenge=f"c{i}") for i, b in enumerate(buyers)
    ]
    caplog.set_level(logging.INFO)

    outcomes = await asyncio.gather(
        *(settler.settle(r, RecordingHooks(chain_reader)) for r in requests)
    )

    assert all(isinstance(o, Settled) for o in outcomes), outcomes
    hashes = {o.tx_hash for o in outcomes if isinstance(o, Settled)}
    assert len(hashes) == 20
    assert sorted(tx_nonce(devchain, h) for h in hashes) == list(range(20))
    assert devchain.balance_of(config.seller.wallet_address) == 20 * PRICE
    assert nonce_of(devchain, gas_account.address, "latest") == 20
    assert not [r for r in caplog.records if "resyncing" in r.getMessage()]


async def test_an_authorization_that_already_went_through_answers_its_original_tx(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer)
    first = await settler.settle(request, RecordingHooks(chain_reader))
    assert isinstance(first, Settled)

    hooks = RecordingHooks(chain_reader)
    again = await settler.settle(request, hooks)

    assert again == Settled(first.tx_hash, buyer.address)
    assert hooks.noted == []  # answered from the chain, nothing sent
    assert nonce_of(devchain, gas_account.address) == 1
    assert devchain.balance_of(config.seller.wallet_address) == PRICE


async def test_a_spent_authorization_past_valid_before_still_answers_its_tx(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
) -> None:
    """The token checks the time window before the nonce, so a late retry of a
    payment that did arrive reverts "expired": the chain, not the revert, decides."""
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer, valid_before=devchain.block_timestamp() + 30)
    first = await settler.settle(request, RecordingHooks(chain_reader))
    assert isinstance(first, Settled)
    devchain.increase_time(60)

    again = await settler.settle(request, RecordingHooks(chain_reader))

    assert again == Settled(first.tx_hash, buyer.address)


async def test_an_authorization_cancelled_by_the_payer_is_refused_as_used(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer)
    nonce = request.authorization.nonce
    cancel = sign_cancel_authorization(buyer, devchain.token, nonce)
    devchain.rpc.send_transaction(
        devchain.deployer,
        to=devchain.token.address,
        data=encode_call(
            "cancelAuthorization(address,bytes32,bytes)",
            buyer.address,
            bytes.fromhex(nonce[2:]),
            bytes.fromhex(cancel[2:]),
        ),
    )

    outcome = await settler.settle(request, RecordingHooks(chain_reader))

    assert isinstance(outcome, Rejected)
    assert outcome.reason == "invalid_exact_evm_nonce_already_used"
    assert nonce_of(devchain, gas_account.address) == 0
    assert devchain.balance_of(config.seller.wallet_address) == 0


async def test_gas_balance_reports_the_wallet_in_wei(
    devchain: Devchain, start_settler: StartSettler, config: Config, gas_account: LocalAccount
) -> None:
    settler = await start_settler(config)

    assert await settler.gas_balance() == devchain.rpc.get_balance(gas_account.address)
    assert await settler.gas_balance() == 10 * 10**18
