"""Settlements that go through: funds move, the txHash is right, nonces never collide."""

from __future__ import annotations

import asyncio
import logging

import pytest
from x402 import PaymentRequired, PaymentRequirements, ResourceInfo
from x402srv_gaswallet.testing import PRICE, SettlerRig, request_from, tx_nonce

from x402srv.devchain import encode_call, sign_cancel_authorization
from x402srv.interfaces import Rejected, Settled
from x402srv.testing.buyers import official_client


async def test_settlement_moves_the_funds_and_returns_its_tx_hash(rig: SettlerRig) -> None:
    settler = await rig.start()
    buyer, hooks = rig.buyer, rig.hooks()
    before = rig.devchain.balance_of(buyer.address)

    outcome = await settler.settle(rig.request(), hooks)

    assert isinstance(outcome, Settled), outcome
    assert outcome.payer == buyer.address
    assert rig.received() == PRICE
    assert rig.devchain.balance_of(buyer.address) == before - PRICE
    (log,) = rig.devchain.transfer_logs(to=rig.seller)
    assert (log.tx_hash, log.from_address, log.value) == (outcome.tx_hash, buyer.address, PRICE)
    # The hash was handed to the pipeline once, before the node had the transaction.
    assert hooks.noted == [outcome.tx_hash]
    assert hooks.known_when_noted == [False]
    assert rig.gas_nonce("latest") == 1


async def test_payment_signed_by_the_official_x402_client_settles(rig: SettlerRig) -> None:
    settler = await rig.start()
    requirements = PaymentRequirements(
        scheme="exact",
        network=rig.devchain.network,
        asset=rig.devchain.token.address,
        amount=str(PRICE),
        pay_to=rig.seller,
        max_timeout_seconds=300,
        extra=rig.devchain.token.eip712_extra,
    )
    payment = await official_client(rig.buyer).create_payment_payload(
        PaymentRequired(accepts=[requirements], resource=ResourceInfo(url="https://s.example/x"))
    )
    wire = payment.model_dump(mode="json", by_alias=True)
    inner = wire["payload"]

    outcome = await settler.settle(
        request_from(rig.config, inner["signature"], inner["authorization"]), rig.hooks()
    )

    assert isinstance(outcome, Settled), outcome
    assert rig.received() == PRICE
    assert rig.devchain.authorization_state(rig.buyer.address, inner["authorization"]["nonce"])


async def test_twenty_settlements_at_once_all_land_with_distinct_nonces(
    rig: SettlerRig, caplog: pytest.LogCaptureFixture
) -> None:
    settler = await rig.start()
    buyers = [rig.devchain.new_account(eth=0) for _ in range(20)]
    requests = [rig.request(b, challenge=f"c{i}") for i, b in enumerate(buyers)]
    caplog.set_level(logging.INFO)

    outcomes = await asyncio.gather(*(settler.settle(r, rig.hooks()) for r in requests))

    assert all(isinstance(o, Settled) for o in outcomes), outcomes
    hashes = {o.tx_hash for o in outcomes if isinstance(o, Settled)}
    assert len(hashes) == 20
    assert sorted(tx_nonce(rig.devchain, h) for h in hashes) == list(range(20))
    assert rig.received() == 20 * PRICE
    assert rig.gas_nonce("latest") == 20
    assert not [r for r in caplog.records if "resyncing" in r.getMessage()]


async def test_an_authorization_that_already_went_through_answers_its_original_tx(
    rig: SettlerRig,
) -> None:
    settler = await rig.start()
    request = rig.request()
    first = await settler.settle(request, rig.hooks())
    assert isinstance(first, Settled)

    hooks = rig.hooks()
    again = await settler.settle(request, hooks)

    assert again == Settled(first.tx_hash, rig.buyer.address)
    assert hooks.noted == []  # answered from the chain, nothing sent
    assert rig.gas_nonce() == 1
    assert rig.received() == PRICE


async def test_a_spent_authorization_past_valid_before_still_answers_its_tx(
    rig: SettlerRig,
) -> None:
    """The token checks the time window before the nonce, so a late retry of a
    payment that did arrive reverts "expired": the chain, not the revert, decides."""
    settler = await rig.start()
    request = rig.request(valid_before=rig.devchain.block_timestamp() + 30)
    first = await settler.settle(request, rig.hooks())
    assert isinstance(first, Settled)
    rig.devchain.increase_time(60)

    again = await settler.settle(request, rig.hooks())

    assert again == Settled(first.tx_hash, rig.buyer.address)


async def test_an_authorization_cancelled_by_the_payer_is_refused_as_used(
    rig: SettlerRig,
) -> None:
    settler = await rig.start()
    devchain, buyer = rig.devchain, rig.buyer
    request = rig.request()
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

    outcome = await settler.settle(request, rig.hooks())

    assert isinstance(outcome, Rejected)
    assert outcome.reason == "invalid_exact_evm_nonce_already_used"
    assert rig.gas_nonce() == 0
    assert rig.received() == 0


async def test_gas_balance_reports_the_wallet_in_wei(rig: SettlerRig) -> None:
    settler = await rig.start()

    assert await settler.gas_balance() == rig.devchain.rpc.get_balance(rig.gas_account.address)
    assert await settler.gas_balance() == 10 * 10**18
