"""Time-dependent rows, with the server's clock injected instead of sleeping.

The app runs in-process (Sanic's ASGI test client) with a clock the test moves;
settlement still happens for real on anvil through the facilitator process.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from sanic import Sanic

from tests.support.clock import MovableClock
from tests.support.problems import assert_problem
from tests.support.seller import JWT_SECRET
from x402srv.access.records import State
from x402srv.config.models import parse_config
from x402srv.devchain import Devchain
from x402srv.server.app import create_app
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config


class _Response:
    """The bits of an httpx.Response that ``assert_problem`` reads."""

    def __init__(self, status: int, body: Any, headers: Any) -> None:
        self.status_code, self.body, self.headers = status, body, headers

    def json(self) -> Any:
        return self.body

    @property
    def text(self) -> str:
        return str(self.body)


class InProcessSeller:
    def __init__(
        self, app: Sanic[Any, Any], clock: MovableClock, chain: Devchain, wallet: str
    ) -> None:
        self.app, self.clock, self.chain, self.wallet = app, clock, chain, wallet

    async def post(self, body: dict[str, Any], header: str | None = None) -> _Response:
        headers = {"PAYMENT-SIGNATURE": header} if header else {}
        _, response = await self.app.asgi_client.post("/x402/access", json=body, headers=headers)
        return _Response(response.status, response.json, response.headers)

    async def state(self, challenge_id: str) -> State:
        # The ASGI test client opens and closes the app's plugins around each request.
        store = self.app.ctx.pipeline.store
        await store.start()
        try:
            record = await store.get_challenge(challenge_id)
        finally:
            await store.close()
        assert record is not None
        return State(record.state)


@pytest.fixture
async def clocked_seller(
    devchain: Devchain,
    facilitator_url: str,
    tmp_path: Path,
) -> InProcessSeller:
    wallet = Account.create().address
    data = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={"backend": "sqlite", "path": str(tmp_path / "x402srv.db")},
        settlement={"strategy": "facilitator", "facilitator_url": facilitator_url},
        credentials={"secret": JWT_SECRET},
        server={"challenge_ttl_seconds": 900},
    )
    clock = MovableClock()
    app = create_app(parse_config(data, base_dir=tmp_path), clock=clock, name="clocked")
    return InProcessSeller(app, clock, devchain, wallet)


async def test_expired_challenge_is_410(
    clocked_seller: InProcessSeller, buyer: LocalAccount
) -> None:
    offer = await clocked_seller.post({"planId": "hourly"})
    assert offer.status_code == 402
    challenge = offer.json()
    request_id = challenge["requestId"]

    clocked_seller.clock.advance(901)
    again = await clocked_seller.post({"planId": "hourly", "requestId": request_id})
    assert_problem(again, 410, "CHALLENGE_EXPIRED")
    assert await clocked_seller.state(challenge["challengeId"]) is State.EXPIRED

    # a payment for it is refused before any chain call
    block = clocked_seller.chain.rpc.block_number()
    payment = signed_payment(buyer, clocked_seller.chain.token, challenge["accepts"][0])
    paid = await clocked_seller.post({"planId": "hourly"}, encode_payment(payment))
    assert_problem(paid, 410, "CHALLENGE_EXPIRED")
    assert clocked_seller.chain.rpc.block_number() == block
    assert clocked_seller.chain.balance_of(clocked_seller.wallet) == 0


async def test_discovery_payment_proves_its_purchase_after_valid_before_and_a_copy_never(
    clocked_seller: InProcessSeller, buyer: LocalAccount
) -> None:
    """The buyer's own header (it echoes the 402's requestId) gets its grant before and
    after validBefore; the same header without the requestId, as anyone can rebuild it
    from the chain, gets 409 at both times (docs/design.md, "Who gets a grant")."""
    discovery = (await clocked_seller.post({})).json()
    payment = signed_payment(buyer, clocked_seller.chain.token, discovery["accepts"][0])
    header = encode_payment(payment)
    copied = copy.deepcopy(payment)
    del copied["accepted"]["extra"]["requestId"]
    first = await clocked_seller.post({}, header)
    assert first.status_code == 200, first.text
    assert first.json()["requestId"] == payment["accepted"]["extra"]["requestId"]
    again = await clocked_seller.post({}, header)
    assert again.json() == first.json()
    assert_problem(
        await clocked_seller.post({}, encode_payment(copied)), 409, "TX_ALREADY_REDEEMED"
    )

    valid_before = int(payment["payload"]["authorization"]["validBefore"])
    clocked_seller.clock.advance(valid_before - clocked_seller.clock() + 1)
    late = await clocked_seller.post({}, header)
    assert late.json() == first.json()
    stolen = await clocked_seller.post({}, encode_payment(copied))
    assert_problem(stolen, 409, "TX_ALREADY_REDEEMED")
    assert "accessToken" not in stolen.text
    by_request_id = await clocked_seller.post(
        {"planId": "hourly", "requestId": first.json()["requestId"]}
    )
    assert by_request_id.json() == first.json()
