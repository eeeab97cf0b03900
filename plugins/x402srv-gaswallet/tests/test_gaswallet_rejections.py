"""Payments the token refuses: the x402 reason comes back and nothing is sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet.testing import (
    PRICE,
    RecordingHooks,
    StartSettler,
    nonce_of,
    signed_request,
)

from x402srv.chain import ChainReader
from x402srv.config import Config
from x402srv.devchain import Devchain
from x402srv.interfaces import Rejected, SettlementRequest

Build = Callable[[Devchain, Config, LocalAccount], SettlementRequest]


def _tampered_value(devchain: Devchain, config: Config, buyer: LocalAccount) -> SettlementRequest:
    request = signed_request(devchain, config, buyer)
    auth = replace(request.authorization, value=PRICE + 1)  # signed for PRICE
    return replace(request, authorization=auth)


def _signed_by_someone_else(
    devchain: Devchain, config: Config, buyer: LocalAccount
) -> SettlementRequest:
    impostor = devchain.new_account(eth=0, usdc_atomic=0)
    forged = signed_request(devchain, config, impostor)
    return replace(forged, authorization=replace(forged.authorization, payer=buyer.address))


def _too_poor(devchain: Devchain, config: Config, buyer: LocalAccount) -> SettlementRequest:
    poor = devchain.new_account(eth=0, usdc_atomic=PRICE - 1)
    return signed_request(devchain, config, poor)


def _expired(devchain: Devchain, config: Config, buyer: LocalAccount) -> SettlementRequest:
    return signed_request(devchain, config, buyer, valid_before=devchain.block_timestamp() - 1)


def _not_yet_valid(devchain: Devchain, config: Config, buyer: LocalAccount) -> SettlementRequest:
    return signed_request(devchain, config, buyer, valid_after=devchain.block_timestamp() + 3600)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (_tampered_value, "invalid_exact_evm_payload_signature"),
        (_signed_by_someone_else, "invalid_exact_evm_payload_signature"),
        (_too_poor, "invalid_exact_evm_insufficient_balance"),
        (_expired, "invalid_exact_evm_payload_authorization_valid_before"),
        (_not_yet_valid, "invalid_exact_evm_payload_authorization_valid_after"),
    ],
)
async def test_a_refused_payment_maps_to_its_reason_and_sends_nothing(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
    build: Build,
    reason: str,
) -> None:
    settler = await start_settler(config)
    request = build(devchain, config, buyer)
    hooks = RecordingHooks(chain_reader)

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == reason
    assert hooks.noted == []
    assert nonce_of(devchain, gas_account.address, "pending") == 0
    assert devchain.balance_of(config.seller.wallet_address) == 0
    assert not devchain.authorization_state(
        request.authorization.payer, request.authorization.nonce
    )


async def test_a_signature_that_is_not_65_bytes_is_refused_without_the_node(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    settler = await start_settler(config)
    request = signed_request(devchain, config, buyer)
    short = replace(request.authorization, signature=request.authorization.signature[:-2])

    outcome = await settler.settle(
        replace(request, authorization=short), RecordingHooks(chain_reader)
    )

    assert outcome == Rejected(
        "invalid_exact_evm_payload_signature",
        "The authorization's signature does not match its payer.",
    )
    assert nonce_of(devchain, gas_account.address) == 0


async def test_gas_above_the_configured_cap_is_refused_before_sending(
    devchain: Devchain,
    chain_reader: ChainReader,
    start_settler: StartSettler,
    config: Config,
    buyer: LocalAccount,
    gas_account: LocalAccount,
) -> None:
    base_fee = int(
        devchain.rpc.call("eth_getBlockByNumber", ["latest", False])["baseFeePerGas"], 16
    )
    cap_gwei = base_fee / 2 / 10**9  # below the base fee: no transaction could be mined
    settler = await start_settler(
        config,
        options={"poll_interval_seconds": 0.05, "max_fee_per_gas_gwei": f"{cap_gwei:.9f}"},
    )
    hooks = RecordingHooks(chain_reader)

    outcome = await settler.settle(signed_request(devchain, config, buyer), hooks)

    assert isinstance(outcome, Rejected)
    assert outcome.reason == "unexpected_settle_error"
    assert "cap" in outcome.detail
    assert hooks.noted == []
    assert nonce_of(devchain, gas_account.address) == 0
