"""An OWED top-up is paid back by the automatic refund (``[refunds] auto_owed_top_ups``).

The top-up becomes OWED exactly as in ``test_owed_top_ups`` (the server is
SIGKILLed after the top-up is PAID, the seller revokes the grant, the restarted
server's ``x402srv reconcile`` delivers it late); the same reconcile pass then
asks for its refund and sends it. Counted from Transfer events: one transfer of
the top-up's amount from the refund wallet to the buyer; a second pass sends
nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.metering import CALLS_3_AMOUNT, PLANS, metering_routes
from tests.support.problems import assert_problem
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

REFUND_KEY_ENV = "X402SRV_TEST_REFUND_KEY"


async def test_an_owed_top_up_is_refunded_automatically_once(
    start_seller: Callable[..., Seller], echo_upstream: AppProcess, buyer: LocalAccount
) -> None:
    seller = start_seller("gas-wallet", plans=PLANS, routes=metering_routes(echo_upstream.url))
    wallet = seller.chain.new_account(eth=0, usdc_atomic=10 * CALLS_3_AMOUNT)
    http, _ = paying_client(buyer)
    async with http:
        grant = (await http.post(seller.access_url, json={"planId": "calls-3"})).json()
    start_block = seller.chain.rpc.block_number() + 1

    seller.server.env = {**seller.server.env, "X402SRV_FAILPOINT": "after-paid"}
    seller.server.start()
    body = {"topUp": grant["requestId"], "requestId": str(uuid.uuid4())}
    challenge = httpx.post(seller.access_url, json=body).json()
    header = encode_payment(signed_payment(buyer, seller.chain.token, challenge["accepts"][0]))
    with pytest.raises(httpx.TransportError):
        httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}, timeout=30)
    process = seller.server.process
    assert process is not None and process.wait(10) == -9, "the failpoint did not kill the server"
    top_up = challenge["challengeId"]
    assert x402srv(seller, "grants", "revoke", grant["challengeId"]).returncode == 0

    # The refund wallet and the rule are switched on for the restart (off by default).
    seller.server.env = {k: v for k, v in seller.server.env.items() if k != "X402SRV_FAILPOINT"}
    seller.server.env[REFUND_KEY_ENV] = "0x" + bytes(wallet.key).hex()
    seller.server.config = {
        **seller.server.config,
        "refunds": {"private_key": {"env": REFUND_KEY_ENV}, "auto_owed_top_ups": True},
    }
    seller.server.start()
    reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    assert f"{top_up}  PAID -> OWED" in reconciled.stdout
    assert x402srv(seller, "reconcile", "--grace-seconds", "0").returncode == 0

    listed = x402srv(seller, "refunds", "list", "--purchase", top_up).stdout.splitlines()
    assert len(listed) == 1
    assert " REFUNDED " in listed[0] and "auto:owed-top-up" in listed[0]
    transfers = seller.chain.transfer_logs(from_address=wallet.address, from_block=start_block)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), CALLS_3_AMOUNT)]
    refund_id = listed[0].split()[0]
    shown = json.loads(x402srv(seller, "refunds", "show", refund_id).stdout)
    assert (shown["paid"], shown["left"]) == (str(CALLS_3_AMOUNT), "0")

    # The buyer's retry names the revoked grant; its own top-up's fate answers: refunded,
    # with the refund's txHash (with the payment as proof, or the top-up's requestId alone).
    refund_tx = shown["refund"]["tx_hash"]
    retried = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header})
    assert assert_problem(retried, 410, "GRANT_REFUNDED")["txHash"] == refund_tx
    asked = httpx.post(seller.access_url, json=body)
    assert assert_problem(asked, 410, "GRANT_REFUNDED")["txHash"] == refund_tx
    # A new top-up of the revoked grant (no requestId of a top-up) is still refused.
    fresh = httpx.post(seller.access_url, json={"topUp": grant["requestId"]})
    assert_problem(fresh, 410, "GRANT_REVOKED")
