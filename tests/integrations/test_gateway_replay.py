"""The gateway replaying a payment whose grant can no longer open anything, and forged replays.

The official client's paid retry is just the same request with the same
``PAYMENT-SIGNATURE``, so anyone holding that header can send it again. What
it bought may be over by then (the token expired) or unverifiable (the seller
rotated its signing key away): the answer is the 402 or the 401 a token would
get, never a 500. And a header that only copies the public parts of a payment
opens nothing. The app runs in-process with a clock the test moves; settlement
is real (gas wallet on anvil), and so is the upstream.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from sanic import Sanic

from tests.support.apps import AppProcess
from tests.support.clock import MovableClock
from tests.support.gateway import gateway_routes
from tests.support.seller import JWT_SECRET, decode_header, settlement_table
from x402srv.config.models import parse_config
from x402srv.devchain import Devchain
from x402srv.server.app import create_app
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config

OTHER_SECRET = "rotated-jwt-secret-" + "r" * 32
TTL = 60


class Gateway:
    """The seller's config and state, so the test can start it again with other keys."""

    def __init__(self, devchain: Devchain, upstream: AppProcess, directory: Path) -> None:
        self.clock = MovableClock()
        self.env: dict[str, str] = {}
        self.directory = directory
        self.data = {
            "rpc_url": devchain.rpc_url,
            "chain_id": devchain.chain_id,
            "asset": devchain.token.address,
            "wallet_address": Account.create().address,
            "store": {"backend": "sqlite", "path": str(directory / "x402srv.db")},
            "settlement": settlement_table("gas-wallet", devchain, None, self.env),
            "plans": [
                {
                    "plan_id": "hourly",
                    "unit_amount": "$0.10",
                    "description": "One hour",
                    "token_ttl_seconds": TTL,
                },
            ],
            "routes": gateway_routes(upstream.url)[:1],
        }

    def app(self, credentials: dict[str, Any]) -> Sanic[Any, Any]:
        config = parse_config(
            seller_config(**self.data, credentials=credentials),
            base_dir=self.directory,
            env=self.env,
        )
        return create_app(config, clock=self.clock, name=f"gateway{id(credentials)}")


@pytest.fixture
def gateway_state(devchain: Devchain, echo_upstream: AppProcess, tmp_path: Path) -> Gateway:
    return Gateway(devchain, echo_upstream, tmp_path)


async def pay_through(app: Sanic[Any, Any], header: str) -> Any:
    _, response = await app.asgi_client.get("/api/forecast", headers={"PAYMENT-SIGNATURE": header})
    return response


async def paid_header(app: Sanic[Any, Any], devchain: Devchain, buyer: LocalAccount) -> str:
    _, offer = await app.asgi_client.get("/api/forecast")
    assert offer.status == 402
    accepted = decode_header(offer.headers["payment-required"])["accepts"][0]
    return encode_payment(signed_payment(buyer, devchain.token, accepted))


async def test_replay_after_the_token_expired_is_the_routes_402(
    gateway_state: Gateway, devchain: Devchain, buyer: LocalAccount
) -> None:
    app = gateway_state.app({"secret": JWT_SECRET})
    header = await paid_header(app, devchain, buyer)
    first = await pay_through(app, header)
    assert first.status == 200, first.text
    again = await pay_through(app, header)
    assert again.status == 200, again.text
    assert again.headers["x-x402-access-token"] == first.headers["x-x402-access-token"]

    gateway_state.clock.advance(TTL + 5)  # the token is over; the authorization is still valid
    late = await pay_through(app, header)
    assert late.status == 402, late.text
    assert "x-x402-access-token" not in late.headers
    assert "expired" in decode_header(late.headers["payment-required"])["error"]


async def test_replay_after_the_signing_key_was_retired_is_401(
    gateway_state: Gateway, devchain: Devchain, buyer: LocalAccount
) -> None:
    app = gateway_state.app({"secret": JWT_SECRET})
    header = await paid_header(app, devchain, buyer)
    assert (await pay_through(app, header)).status == 200

    still_listed = gateway_state.app({"secret": OTHER_SECRET, "previous_keys": [JWT_SECRET]})
    assert (await pay_through(still_listed, header)).status == 200

    retired = gateway_state.app({"secret": OTHER_SECRET})
    refused = await pay_through(retired, header)
    assert refused.status == 401, refused.text
    assert refused.json["code"] == "INVALID_TOKEN"
    assert refused.headers["www-authenticate"] == 'Bearer error="invalid_token"'


async def test_forged_copy_of_a_gateway_payment_opens_nothing(
    gateway_state: Gateway, devchain: Devchain, buyer: LocalAccount
) -> None:
    """The payment's public parts (from, nonce, value) with a made-up signature."""
    app = gateway_state.app({"secret": JWT_SECRET})
    header = await paid_header(app, devchain, buyer)
    paid = await pay_through(app, header)
    assert paid.status == 200
    attack = copy.deepcopy(decode_header(header))
    attack["payload"]["signature"] = "0x" + "11" * 65
    stolen = await pay_through(app, encode_payment(attack))
    assert stolen.status == 402, stolen.text
    assert "x-x402-access-token" not in stolen.headers
    assert paid.headers["x-x402-access-token"] not in stolen.text
    assert stolen.json["reason"] == "invalid_exact_evm_payload_signature"
