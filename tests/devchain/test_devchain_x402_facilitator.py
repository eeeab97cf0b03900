"""The official x402 facilitator verifies and settles payments in our token on anvil.

This is the compatibility proof for EIP3009Token: the SDK reads `authorizationState`,
simulates `transferWithAuthorization`, maps our revert strings to its error codes, and
checks the Transfer event of the settlement receipt.
"""

from __future__ import annotations

import pytest
from eth_account.signers.local import LocalAccount
from x402 import PaymentPayload, PaymentRequirements, x402FacilitatorSync
from x402.mechanisms.evm import EthAccountSigner, FacilitatorWeb3Signer
from x402.mechanisms.evm.constants import ERR_INSUFFICIENT_BALANCE, ERR_NONCE_ALREADY_USED
from x402.mechanisms.evm.exact import ExactEvmClientScheme, register_exact_evm_facilitator

from x402srv.devchain import Devchain


@pytest.fixture(scope="module")
def facilitator(devchain: Devchain) -> x402FacilitatorSync:
    gas_payer = devchain.new_account(usdc_atomic=0)
    signer = FacilitatorWeb3Signer(
        private_key="0x" + bytes(gas_payer.key).hex(), rpc_url=devchain.rpc_url
    )
    facilitator = x402FacilitatorSync()
    register_exact_evm_facilitator(facilitator, signer, networks=devchain.network)
    return facilitator


def pay(
    devchain: Devchain, payer: LocalAccount, pay_to: str, amount: int
) -> tuple[PaymentPayload, PaymentRequirements]:
    requirements = PaymentRequirements(
        scheme="exact",
        network=devchain.network,
        asset=devchain.token.address,
        amount=str(amount),
        pay_to=pay_to,
        max_timeout_seconds=600,
        extra=devchain.token.eip712_extra,
    )
    inner = ExactEvmClientScheme(EthAccountSigner(payer)).create_payment_payload(requirements)
    return PaymentPayload(payload=inner, accepted=requirements), requirements


def test_verify_and_settle(devchain: Devchain, facilitator: x402FacilitatorSync) -> None:
    payer = devchain.new_account(eth=0)  # the buyer never needs gas
    seller = devchain.new_account(eth=0, usdc_atomic=0)
    payload, requirements = pay(devchain, payer, seller.address, 1_000_000)

    verified = facilitator.verify(payload, requirements)
    assert verified.is_valid, verified
    assert verified.payer == payer.address

    settled = facilitator.settle(payload, requirements)

    assert settled.success, settled
    assert settled.network == devchain.network
    assert devchain.balance_of(seller.address) == 1_000_000
    (log,) = devchain.transfer_logs(to=seller.address)
    assert (log.tx_hash, log.from_address, log.value) == (
        settled.transaction,
        payer.address,
        1_000_000,
    )

    replay = facilitator.verify(payload, requirements)
    assert not replay.is_valid
    assert replay.invalid_reason == ERR_NONCE_ALREADY_USED


def test_verify_reports_insufficient_balance(
    devchain: Devchain, facilitator: x402FacilitatorSync
) -> None:
    payer = devchain.new_account(eth=0, usdc_atomic=999)
    payload, requirements = pay(devchain, payer, devchain.new_account(eth=0).address, 1_000)

    verified = facilitator.verify(payload, requirements)

    assert not verified.is_valid
    assert verified.invalid_reason == ERR_INSUFFICIENT_BALANCE
