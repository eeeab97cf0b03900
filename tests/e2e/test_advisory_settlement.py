"""Regressions where a settler's word decided what only the chain or the signature may decide.

One named test each (as pyjwt's test_advisory.py), each failing on the release
before the fix:

- a facilitator that names someone else as the payer (a spreadsheet formula)
  put its string into the record, the token, ``PAYMENT-RESPONSE`` and the
  sales export; the payer is the authorization's signer;
- after a facilitator timed out, the next one was asked while the first
  one's transaction was still pending (one read at ``latest``): gas for a
  reverted transaction, and a history naming the wrong settler;
- #2 answered 500 at once and #3 settled then answered 500: the history said
  "settled by #2 (after it timed out)"; it names the settler whose
  transaction the chain shows;
- with every settler unreachable a buyer was told ``402 PAYMENT_FAILED``
  ("could not verify the payment"): now ``503 SETTLER_UNAVAILABLE`` with
  ``Retry-After``, the challenge PENDING again (keeping its claim), so the
  same payment settles once a settler is back.

Everything is real: anvil, facilitator processes running the official SDK's
facilitator code (``x402srv.testing.facilitator_app``; the lying one settles
for real and alters only the payer of its answer, which the SDK cannot be told
to do), x402srv as a process, the official x402 client as the buyer.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.support.cli import x402srv
from tests.support.networks import (
    Option,
    buy_with_official_client,
    facilitator_settler,
    funded_buyer,
    nothing_listening,
    reasons,
    record,
    seller_document,
    sender,
    start,
    transfers,
)
from tests.support.problems import assert_problem
from tests.support.seller import Seller, decode_header
from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.facilitator_app import LYING_PAYER
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import ServerProcess, free_port


@pytest.fixture
def new_seller(tmp_path: Path) -> Iterator[Callable[..., tuple[ServerProcess, str]]]:
    """``new_seller(settler urls) -> (server, wallet)``: one network, the session's anvil."""
    started: list[ServerProcess] = []

    def run(devchain: Devchain, urls: list[str]) -> tuple[ServerProcess, str]:
        wallet = Account.create().address
        settlers = [facilitator_settler(url) for url in urls]
        document = seller_document(wallet, [(devchain, [devchain.token], settlers)])
        server = start(document, tmp_path / f"seller-{len(started)}", {})
        started.append(server)
        return server, wallet

    yield run
    for server in started:
        server.stop()


def label(url: str, position: int, chain: Devchain) -> str:
    return f"facilitator {url} #{position} on {chain.network}"


def buy(server: ServerProcess, buyer: Any, option: Option) -> dict[str, Any]:
    response = asyncio.run(buy_with_official_client(server.access_url, buyer, option))
    assert response.status_code == 200, response.text + "\n" + server.logs()[-6000:]
    return dict(response.json())


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


# ---------------------------------------------------------------- the payer


async def test_the_payer_is_the_signer_when_a_facilitator_names_another(
    start_seller: Callable[..., Seller],
    facilitator: Callable[..., FacilitatorProcess],
    devchain: Devchain,
) -> None:
    """No RPC of its own: only the signature says who paid, never the facilitator's answer."""
    liar = facilitator("settle-payer-lie")
    no_rpc = {"asset": devchain.token.address, "asset_name": "USD Coin", "asset_version": "2"}
    seller = start_seller("facilitator", facilitator_url=liar.url, network=no_rpc)
    option = Option(devchain, devchain.token)
    buyer = funded_buyer(option)
    started = time.time() - 1

    paid = await buy_with_official_client(seller.access_url, buyer, option)

    assert paid.status_code == 200, paid.text
    grant = paid.json()
    assert transfers([option], seller.wallet) == [
        (devchain.network, grant["txHash"].lower(), 100_000)
    ]
    assert jwt_claims(grant["accessToken"])["payer"] == buyer.address
    assert decode_header(paid.headers["payment-response"])["payer"] == buyer.address
    shown = x402srv(seller, "challenges", "show", grant["challengeId"])
    assert json.loads(shown.stdout)["payer"] == buyer.address, shown.stderr
    sales = x402srv(seller, "export-sales", "--from", str(started))
    assert sales.returncode == 0, sales.stderr
    rows = [r for r in csv.DictReader(io.StringIO(sales.stdout))]
    assert [r["payer"] for r in rows if r["challengeId"] == grant["challengeId"]] == [buyer.address]
    for seen in (paid.text, paid.headers["payment-response"], shown.stdout, sales.stdout):
        assert "HYPERLINK" not in seen and LYING_PAYER not in seen
    assert "HYPERLINK" not in seller.server.logs()


# ---------------------------------------------------------------- failover


def test_failover_waits_for_a_timed_out_settlers_pending_transaction(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    facilitator: Callable[..., FacilitatorProcess],
    devchain: Devchain,
) -> None:
    """#1 broadcasts, then our read timeout fires while its transaction waits to be mined.

    The chain's pending block shows the authorization used, so #2 is never asked
    (it records every request it gets); once a block is mined the grant names #1,
    the sender of the one transfer.
    """
    first, second = facilitator(), facilitator(record=True)
    server, wallet = new_seller(devchain, [first.url, second.url])
    option = Option(devchain, devchain.token)
    buyer = funded_buyer(option)
    devchain.rpc.call("evm_setAutomine", [False])  # #1's transaction stays pending
    try:
        with ThreadPoolExecutor(1) as pool:
            bought = pool.submit(buy, server, buyer, option)
            deadline = time.monotonic() + 60
            while "waiting for it" not in server.logs() and not second.received():
                assert time.monotonic() < deadline, server.logs()[-4000:]
                assert not bought.done(), bought.result()
                time.sleep(0.1)
            assert second.received() == [], "#2 was asked while #1's transaction was pending"
            devchain.rpc.call("evm_mine", [])
            grant = bought.result(timeout=60)
    finally:
        devchain.rpc.call("evm_setAutomine", [True])
        devchain.rpc.call("evm_mine", [])

    assert second.received() == []
    assert transfers([option], wallet) == [(option.network, grant["txHash"].lower(), 100_000)]
    assert sender(option, grant["txHash"]) == str(first.address).lower()
    history = reasons(server, grant["challengeId"])
    waited = [r for r in history if "waiting for it before asking another settler" in r]
    assert waited and waited[0].startswith(
        f"{label(first.url, 1, devchain)} left the outcome unknown (facilitator /settle: "
        "ReadTimeout); a pending transaction uses the authorization"
    ), history
    assert f"settled on-chain by {label(first.url, 1, devchain)}" in history
    assert not any("trying the next" in r for r in history), history


def test_the_history_names_the_settler_whose_transaction_moved_the_money(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    facilitator: Callable[..., FacilitatorProcess],
    devchain: Devchain,
) -> None:
    """#1 refuses the connection, #2 answers 500 at once, #3 settles and then answers 500."""
    down, broken, late = (
        nothing_listening(),
        facilitator("settle-500"),
        facilitator("settle-500-after"),
    )
    server, wallet = new_seller(devchain, [down, broken.url, late.url])
    option = Option(devchain, devchain.token)

    grant = buy(server, funded_buyer(option), option)

    assert transfers([option], wallet) == [(option.network, grant["txHash"].lower(), 100_000)]
    assert sender(option, grant["txHash"]) == str(late.address).lower()
    history = reasons(server, grant["challengeId"])
    assert f"settled on-chain by {label(late.url, 3, devchain)}" in history, history
    assert not any("after it timed out" in r for r in history), history
    assert (
        f"{label(broken.url, 2, devchain)} could not settle (facilitator answered 500; the chain "
        "shows it unused); trying the next"
    ) in history


# ---------------------------------------------------------------- no settler reachable


def test_no_settler_reachable_is_503_with_retry_after_and_changes_nothing(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    facilitator: Callable[..., FacilitatorProcess],
    devchain: Devchain,
) -> None:
    """Both settlers refuse the connection: the payment is fine, so it is not a 402."""
    port = free_port()
    server, wallet = new_seller(devchain, [f"http://127.0.0.1:{port}", nothing_listening()])
    option = Option(devchain, devchain.token)
    buyer = funded_buyer(option)
    challenge = httpx.post(server.access_url, json={"planId": "hourly"}).json()
    header = encode_payment(signed_payment(buyer, devchain.token, challenge["accepts"][0]))

    def pay() -> httpx.Response:
        return httpx.post(
            server.access_url,
            json={"planId": "hourly", "requestId": challenge["requestId"]},
            headers={"PAYMENT-SIGNATURE": header},
            timeout=60,
        )

    refused = pay()

    problem = assert_problem(refused, 503, "SETTLER_UNAVAILABLE")
    assert int(refused.headers["retry-after"]) >= 1
    assert "reason" not in problem
    assert transfers([option], wallet) == []
    shown = record(server, challenge["challengeId"])
    assert (shown["state"], shown["tx_hash"]) == ("PENDING", None)
    # Kept, watched until it can no longer move (docs/protocol/states.md, "A payment given
    # back"): a settler that failed may have seen it.
    assert shown["payment"]["submitted"] is True and shown["payment"]["lease_until"]
    assert shown["history"][-1]["reason"].startswith("no settler could be reached")
    again = pay()  # the claim was released: the same payment is refused the same way
    assert_problem(again, 503, "SETTLER_UNAVAILABLE")

    facilitator(port=port)  # #1 is back
    paid = pay()
    assert paid.status_code == 200, paid.text
    assert transfers([option], wallet) == [(option.network, paid.json()["txHash"].lower(), 100_000)]
