"""The crash matrix: SIGKILL a real server at each settlement boundary, then recover.

For every failpoint (x402srv.access.failpoints) the server process is killed in the
middle of a purchase, restarted without the failpoint, ``x402srv reconcile``
runs once, and then the buyer's retry of the very same request must get a
grant, the chain must hold exactly one transfer, and ``x402srv audit`` must
find nothing unmatched. The crash is the only thing injected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.cli import x402srv
from tests.support.seller import Seller
from x402srv.access.failpoints import POINTS
from x402srv.devchain import Devchain

HOURLY = 100_000


def store_config(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "sqlite":
        return {"backend": "sqlite", "path": "x402srv.db"}
    redis_url: str = request.getfixturevalue("redis_url")
    return {"backend": "redis", "url": redis_url, "redis": {"key_prefix": f"crash-{id(request)}:"}}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
@pytest.mark.parametrize("point", POINTS)
def test_crash_then_recover(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    buyer: LocalAccount,
    request: pytest.FixtureRequest,
    point: str,
    backend: str,
) -> None:
    seller = start_seller(
        "gas-wallet",
        store=store_config(backend, request),
        env={"X402SRV_FAILPOINT": point},
    )
    start_block = devchain.rpc.block_number()
    payment = seller.pay_with(buyer, "hourly")
    header = payment.header
    body = {"planId": "hourly", "requestId": payment.request_id}

    with pytest.raises(httpx.TransportError):  # the server dies mid-request
        httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}, timeout=30)
    process = seller.server.process
    assert process is not None
    assert process.wait(10) == -9, "the failpoint did not kill the server"

    seller.server.env = {k: v for k, v in seller.server.env.items() if k != "X402SRV_FAILPOINT"}
    seller.server.start()
    reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    assert payment.challenge_id in reconciled.stdout

    retried = httpx.post(
        seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}, timeout=30
    )
    assert retried.status_code == 200, retried.text
    grant = retried.json()
    assert grant["challengeId"] == payment.challenge_id
    transfers = seller.chain.transfer_logs(to=seller.wallet, from_block=start_block)
    assert len(transfers) == 1
    assert transfers[0].tx_hash.lower() == grant["txHash"].lower()
    assert seller.balance() == HOURLY

    audited = x402srv(seller, "audit", "--from-block", str(start_block))
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "1 transfer: 1 matched, 0 unmatched; 0 records without their transfer" in audited.stderr
    assert "accessToken" not in reconciled.stdout + audited.stdout
