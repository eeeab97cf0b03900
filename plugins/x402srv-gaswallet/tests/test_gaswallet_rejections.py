"""Payments the token refuses: the x402 reason comes back and nothing is sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from x402srv_gaswallet.testing import PRICE, SettlerRig

from x402srv.interfaces import Rejected, SettlementRequest

Build = Callable[[SettlerRig], SettlementRequest]


def _tampered_value(rig: SettlerRig) -> SettlementRequest:
    request = rig.request()
    auth = replace(request.authorization, value=PRICE + 1)  # signed for PRICE
    return replace(request, authorization=auth)


def _signed_by_someone_else(rig: SettlerRig) -> SettlementRequest:
    forged = rig.request(rig.devchain.new_account(eth=0, usdc_atomic=0))
    return replace(forged, authorization=replace(forged.authorization, payer=rig.buyer.address))


def _too_poor(rig: SettlerRig) -> SettlementRequest:
    return rig.request(rig.devchain.new_account(eth=0, usdc_atomic=PRICE - 1))


def _expired(rig: SettlerRig) -> SettlementRequest:
    return rig.request(valid_before=rig.devchain.block_timestamp() - 1)


def _not_yet_valid(rig: SettlerRig) -> SettlementRequest:
    return rig.request(valid_after=rig.devchain.block_timestamp() + 3600)


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
    rig: SettlerRig, build: Build, reason: str
) -> None:
    settler = await rig.start()
    request = build(rig)
    hooks = rig.hooks()

    outcome = await settler.settle(request, hooks)

    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason == reason
    assert hooks.noted == []
    rig.assert_nothing_moved(request)


async def test_a_signature_that_is_not_65_bytes_is_refused_without_the_node(
    rig: SettlerRig,
) -> None:
    settler = await rig.start()
    request = rig.request()
    short = replace(request.authorization, signature=request.authorization.signature[:-2])

    outcome = await settler.settle(replace(request, authorization=short), rig.hooks())

    assert outcome == Rejected(
        "invalid_exact_evm_payload_signature",
        "The authorization's signature does not match its payer.",
    )
    assert rig.gas_nonce() == 0


async def test_gas_above_the_configured_cap_is_refused_before_sending(rig: SettlerRig) -> None:
    block = rig.devchain.rpc.call("eth_getBlockByNumber", ["latest", False])
    cap_gwei = int(block["baseFeePerGas"], 16) / 2 / 10**9  # below the base fee: never mined
    settler = await rig.start(
        options={"poll_interval_seconds": 0.05, "max_fee_per_gas_gwei": round(cap_gwei, 9)}
    )
    hooks = rig.hooks()

    outcome = await settler.settle(rig.request(), hooks)

    assert isinstance(outcome, Rejected)
    assert outcome.reason == "unexpected_settle_error"
    assert "cap" in outcome.detail
    assert hooks.noted == []
    assert rig.gas_nonce() == 0
