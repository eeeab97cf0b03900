"""A running test seller (``Seller``) and the settings the core's seller fixtures give it.

``tests/conftest.py`` starts sellers; tests in every directory take a ``Seller``.
``Seller.pay_with`` signs a payment by hand for a fresh challenge, for tests that
send it at a moment of their choosing (a buyer agent's way is
``tests.support.purchase.buy``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import httpx
from eth_account.signers.local import LocalAccount

from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import ServerProcess

JWT_SECRET = "test-jwt-secret-" + "s" * 32
GAS_KEY_ENV = "X402SRV_TEST_GAS_WALLET_KEY"


@dataclass(frozen=True)
class SignedPayment:
    """One challenge paid by hand: the test sends it when, and as often as, it likes."""

    challenge: dict[str, Any]  # the 402 it pays
    document: dict[str, Any]  # the v2 PaymentPayload

    @property
    def header(self) -> str:
        """The ``PAYMENT-SIGNATURE`` value."""
        return encode_payment(self.document)

    @property
    def headers(self) -> dict[str, str]:
        return {"PAYMENT-SIGNATURE": self.header}

    @property
    def challenge_id(self) -> str:
        return str(self.challenge["challengeId"])

    @property
    def request_id(self) -> str:
        return str(self.challenge["requestId"])

    @property
    def nonce(self) -> str:
        return str(self.document["payload"]["authorization"]["nonce"])


@dataclass
class Seller:
    """A running seller: its server process, wallet, strategy and JWT secret."""

    server: ServerProcess
    wallet: str
    strategy: str
    config: dict[str, Any]
    chain: Devchain

    @property
    def access_url(self) -> str:
        return self.server.access_url

    def discovery(self) -> dict[str, Any]:
        response = httpx.post(self.access_url, json={})
        assert response.status_code == 402
        return dict(response.json())

    def challenge(self, plan_id: str = "hourly", **body: Any) -> dict[str, Any]:
        response = httpx.post(self.access_url, json={"planId": plan_id, **body})
        assert response.status_code == 402, response.text
        return dict(response.json())

    def balance(self) -> int:
        return self.chain.balance_of(self.wallet)

    def pay_with(
        self, buyer: LocalAccount, plan_id: str = "hourly", **signed: Any
    ) -> SignedPayment:
        """A fresh challenge for ``plan_id``, paid by ``buyer``; ``signed`` overrides a field.

        Nothing is sent yet (``signed_payment`` in ``x402srv.testing.buyers`` names the fields).
        """
        challenge = self.challenge(plan_id)
        accepted = challenge["accepts"][0]
        return SignedPayment(challenge, signed_payment(buyer, self.chain.token, accepted, **signed))


def settlement_table(
    strategy: str, chain: Devchain, facilitator_url: str | None, env: dict[str, str]
) -> dict[str, Any]:
    if strategy == "gas-wallet":
        gas = chain.new_account(eth=1000, usdc_atomic=0)
        env[GAS_KEY_ENV] = "0x" + bytes(gas.key).hex()
        return {"strategy": "gas-wallet", "gas_wallet_private_key": {"env": GAS_KEY_ENV}}
    assert facilitator_url is not None
    return {"strategy": "facilitator", "facilitator_url": facilitator_url}


def decode_header(value: str) -> dict[str, Any]:
    return dict(json.loads(base64.b64decode(value)))
