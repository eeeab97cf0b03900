"""A crash between settlement and crediting a top-up: credited exactly once after restart.

The seller sells calls on the gas wallet; a buyer holds a grant and tops it up
at ``/x402/access``. The server is SIGKILLed (``x402srv.access.failpoints``) after the
top-up is PAID but before its grant is credited (``after-paid``), or after the
credit but before the top-up is DELIVERED (``after-credit``). After a restart
without the failpoint, ``x402srv reconcile`` (after-paid) or the buyer's retry
(after-credit) finishes it: the chain holds one transfer for the top-up, the
grant's account shows the top-up's calls once, and the token bought before
keeps working with them. The crash is the only thing injected.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.credentials import bearer
from tests.support.metering import PLANS, limits, metering_routes
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

TOP_UP = 10_000  # calls-3 costs $0.01


def _store(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    if backend == "postgres":
        table: dict[str, Any] = request.getfixturevalue("postgres_store_table")
        return table
    url: str = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": url, "redis": {"key_prefix": f"topup-{id(request)}:"}}


@pytest.mark.parametrize("backend", ["sqlite", "redis", "postgres"])
@pytest.mark.parametrize("point", ["after-paid", "after-credit"])
async def test_a_top_up_cut_short_is_credited_exactly_once(
    start_seller: Callable[..., Seller],
    echo_upstream: AppProcess,
    buyer: LocalAccount,
    request: pytest.FixtureRequest,
    point: str,
    backend: str,
) -> None:
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=metering_routes(echo_upstream.url),
        store=_store(backend, request),
    )
    http, _ = paying_client(buyer)
    async with http:
        grant = (await http.post(seller.access_url, json={"planId": "calls-3"})).json()
    token = grant["accessToken"]
    for _ in range(3):
        assert httpx.get(f"{seller.server.url}/llm/x", headers=bearer(token)).status_code == 200

    # the server dies in the middle of the top-up
    seller.server.env = {**seller.server.env, "X402SRV_FAILPOINT": point}
    seller.server.start()
    start_block = seller.chain.rpc.block_number() + 1  # after the purchase
    body = {"topUp": grant["requestId"], "requestId": str(uuid.uuid4())}
    challenge = httpx.post(seller.access_url, json=body).json()
    header = encode_payment(signed_payment(buyer, seller.chain.token, challenge["accepts"][0]))
    with pytest.raises(httpx.TransportError):
        httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}, timeout=30)
    process = seller.server.process
    assert process is not None
    assert process.wait(10) == -9, "the failpoint did not kill the server"

    seller.server.env = {k: v for k, v in seller.server.env.items() if k != "X402SRV_FAILPOINT"}
    seller.server.start()
    if point == "after-paid":  # nobody retries: the reconciler finishes it
        reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
        assert reconciled.returncode == 0, reconciled.stderr
        assert challenge["challengeId"] in reconciled.stdout
    retried = httpx.post(
        seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}, timeout=30
    )
    assert retried.status_code == 200, retried.text
    receipt = retried.json()
    assert (receipt["type"], receipt["calls"]) == ("TopUp", 3)
    assert receipt["grantChallengeId"] == grant["challengeId"]

    transfers = seller.chain.transfer_logs(to=seller.wallet, from_block=start_block)
    assert len(transfers) == 1
    assert transfers[0].tx_hash.lower() == receipt["txHash"].lower()

    shown = x402srv(seller, "challenges", "show", grant["challengeId"])
    assert shown.returncode == 0, shown.stderr
    credits = json.loads(shown.stdout)["credits"]
    assert [entry["key"] for entry in credits["added"]] == [
        grant["challengeId"],
        challenge["challengeId"],
    ]
    assert (credits["credits_added"], credits["credits_spent"], credits["credits_left"]) == (
        6,
        3,
        3,
    )
    call = httpx.get(f"{seller.server.url}/llm/x", headers=bearer(token))  # the old token
    assert (call.status_code, limits(call.headers["ratelimit"])["credits"]["r"]) == (200, 2)
    print(
        f"\n[{backend}, crash {point}] credits added {credits['credits_added']} "
        f"(purchase 3 + top-up 3, once), transfers for the top-up: {len(transfers)}"
    )
