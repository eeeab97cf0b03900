"""A top-up delivered late to a grant revoked meanwhile: the payment is owed, never lost.

The seller sells calls on the gas wallet; a buyer holds a grant and tops it up.
The server is SIGKILLed (``x402srv.access.failpoints``) right after the top-up is PAID,
before its calls are credited; the seller then revokes the grant (a
chargeback), and the restarted server's ``x402srv reconcile`` delivers the
top-up late. The grant's token opens nothing any more, so crediting it would
take the buyer's money for nothing: the record moves PAID -> OWED instead, and
``x402srv challenges list|show``, the export and the console say what is owed
to whom. The crash is the only thing injected; everything else is real.
"""

from __future__ import annotations

import csv
import io
import json
import time
import uuid
from collections.abc import Callable

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.cli import x402srv
from tests.support.console import ADMIN_TOKEN, Console, console_pages
from tests.support.metering import CALLS_3_AMOUNT, PLANS, metering_routes
from tests.support.problems import assert_problem
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment


async def test_a_late_top_up_of_a_revoked_grant_is_owed_to_the_buyer(
    start_seller: Callable[..., Seller], echo_upstream: AppProcess, buyer: LocalAccount
) -> None:
    seller = start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=metering_routes(echo_upstream.url),
        admin={"token": ADMIN_TOKEN, "prefix": "/ops"},
    )
    console = Console(seller, f"{seller.server.url}/ops")
    http, _ = paying_client(buyer)
    async with http:
        grant = (await http.post(seller.access_url, json={"planId": "calls-3"})).json()
    started = time.time() - 1

    # the server dies right after the top-up settled, before its calls are credited
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

    revoked = x402srv(seller, "grants", "revoke", grant["challengeId"], "--reason", "chargeback")
    assert revoked.returncode == 0, revoked.stderr
    seller.server.env = {k: v for k, v in seller.server.env.items() if k != "X402SRV_FAILPOINT"}
    seller.server.start()
    reconciled = x402srv(seller, "reconcile", "--grace-seconds", "0")
    assert reconciled.returncode == 0, reconciled.stderr
    assert f"{top_up}  PAID -> OWED  owed to the buyer: its grant" in reconciled.stdout

    shown = json.loads(x402srv(seller, "challenges", "show", top_up).stdout)
    assert shown["state"] == "OWED"
    owed = shown["owed_to_buyer"]
    assert (owed["amount"], owed["payer"]) == (str(CALLS_3_AMOUNT), buyer.address)
    assert owed["why"] == (
        f"owed to the buyer: its grant {grant['challengeId']} was revoked before the top-up "
        "was credited"
    )
    transfers = seller.chain.transfer_logs(to=seller.wallet)
    assert owed["tx_hash"] in [t.tx_hash.lower() for t in transfers]  # the money did arrive
    listed = x402srv(seller, "challenges", "list", "--state", "OWED").stdout.splitlines()
    assert [line for line in listed if line.startswith(top_up)] == [
        next(line for line in listed if line.endswith("owed to the buyer"))
    ]
    credits = json.loads(x402srv(seller, "challenges", "show", grant["challengeId"]).stdout)
    assert [entry["key"] for entry in credits["credits"]["added"]] == [grant["challengeId"]]

    # the buyer's retry is told, and credits nothing either
    retried = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header})
    assert_problem(retried, 410, "GRANT_REVOKED")

    # the seller sees it: the export, the admin API and the console's pages
    sales = x402srv(seller, "export-sales", "--from", str(started)).stdout
    row = next(r for r in csv.DictReader(io.StringIO(sales)) if r["challengeId"] == top_up)
    assert row["status"] == "owed"
    api = console.ok("/purchases", state="OWED")["items"]
    assert [(p["challengeId"], p["owedToBuyer"]) for p in api] == [(top_up, owed["why"])]
    assert [p["challengeId"] for p in console.ok("/reconciler")["owed"]] == [top_up]
    overview, page, listing = console_pages(
        console, "/", f"/purchases/{top_up}", "/purchases?state=OWED"
    )
    assert "1 payment owed to buyers" in overview
    assert 'id="owed"' in page and "OWED to buyer" in page and buyer.address in page
    assert top_up in listing and "OWED to buyer" in listing
