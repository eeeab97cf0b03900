"""Tasks through concurrency, unknown outcomes, late credentials, expiry and other instances.

- Many messages on one task at once: one transfer; the task ends ``completed``
  (the pipeline's compare-and-set guards settlement, the task's own version
  guards the document).
- A facilitator that answers after our timeout: the task stays ``working`` with a
  retry hint; ``tasks/get`` asks again and ends ``completed`` once the chain shows
  the transfer, without settling twice.
- No settler reachable: ``input-required`` with ``payment-failed``,
  ``SETTLEMENT_FAILED`` and a retry hint (``503 SETTLER_UNAVAILABLE``); the same
  payment, sent again once the facilitator is back, completes the task.
- Paid but the credential callback failed: ``working`` with ``payment-completed``
  and the receipt; ``tasks/get`` delivers.
- An expired challenge: the task ``failed`` with ``EXPIRED_PAYMENT`` (in-process
  app with a movable clock, as ``tests/e2e/test_clock.py``).
- Two server processes on one store: either answers for the task.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    ERROR,
    PAYLOAD,
    RECEIPTS,
    STATUS,
    a2a_url,
    data,
    error_of,
    get,
    grant_of,
    message,
    open_task,
    pay,
    payment_for,
    required_of,
    status_metadata,
    task_of,
    text,
)
from tests.support.clock import MovableClock
from tests.support.faults import facilitator_seller, issuer_failing_once
from tests.support.networks import wait_for_file
from tests.support.purchase import HOURLY
from tests.support.seller import JWT_SECRET, Seller
from x402srv.config.models import parse_config
from x402srv.devchain import Devchain
from x402srv.server.app import create_app
from x402srv.testing.buyers import signed_payment
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import free_port, seller_config


def _transfers(seller: Seller) -> int:
    return len(seller.chain.transfer_logs(to=seller.wallet))


async def test_many_payments_on_one_task_at_once_settle_once(
    seller: Seller, buyer: LocalAccount
) -> None:
    url = a2a_url(seller)
    task = open_task(url)
    same = payment_for(seller, buyer, task)
    payments = [same, same, *(payment_for(seller, buyer, task) for _ in range(4))]
    transfers, balance = _transfers(seller), seller.balance()
    envelopes = [
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "message/send",
            "params": {
                "message": message(
                    text("pay"),
                    task_id=task["id"],
                    metadata={STATUS: "payment-submitted", PAYLOAD: payment},
                )
            },
        }
        for n, payment in enumerate(payments)
    ]
    async with httpx.AsyncClient(timeout=60) as http:
        answers = await asyncio.gather(*(http.post(url, json=e) for e in envelopes))
    states = Counter(a.json()["result"]["status"]["state"] for a in answers)
    assert set(states) <= {"completed", "working"}, states
    assert states["completed"] >= 1

    final = task_of(get(url, task["id"]))
    assert final["status"]["state"] == "completed"
    assert _transfers(seller) - transfers == 1
    assert seller.balance() - balance == HOURLY
    receipts = status_metadata(final)[RECEIPTS]
    assert [r["success"] for r in receipts] == [True]
    for answer in answers:
        if answer.json()["result"]["status"]["state"] == "completed":
            assert grant_of(answer.json()["result"]) == grant_of(final)


async def test_an_unknown_outcome_keeps_the_task_working_until_the_chain_tells(
    start_seller: Callable[..., Seller],
    facilitator: Callable[..., FacilitatorProcess],
    buyer: LocalAccount,
    tmp_path: Path,
) -> None:
    """Our timeout fires first; the facilitator settles later; tasks/get ends completed."""
    gate = tmp_path / "gate"  # the facilitator holds the settlement until the test opens it
    gate.mkdir()
    seller = facilitator_seller(start_seller, facilitator("settle-gate", gate=gate).url)
    url = a2a_url(seller)
    task = open_task(url)
    working = task_of(pay(url, task, payment_for(seller, buyer, task)))
    assert working["status"]["state"] == "working"
    metadata = status_metadata(working)
    assert metadata[STATUS] == "payment-submitted"
    assert metadata["x402srv.retryAfterSeconds"] >= 1
    assert metadata["x402srv.problem"]["code"] in ("SETTLEMENT_PENDING", "SETTLEMENT_IN_PROGRESS")
    assert "artifacts" not in working

    assert _transfers(seller) == 0
    (gate / "go-1").touch()  # long after our read timeout, the facilitator goes on
    wait_for_file(gate / "done-1")
    assert _transfers(seller) == 1  # the facilitator finished on its own

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        polled = task_of(get(url, task["id"]))
        if polled["status"]["state"] != "working":
            break
        time.sleep(0.1)
    assert polled["status"]["state"] == "completed", polled
    assert grant_of(polled)["challengeId"] == task["metadata"]["x402srv.challengeId"]
    assert _transfers(seller) == 1  # resolved from the chain, not settled again
    with pytest.raises(AssertionError):
        error_of(get(url, task["id"]), -32603)  # and it stays answered


async def test_no_settler_reachable_leaves_the_task_payable_with_a_retry_hint(
    start_seller: Callable[..., Seller],
    facilitator: Callable[..., FacilitatorProcess],
    buyer: LocalAccount,
) -> None:
    port = free_port()
    up = facilitator(port=port)
    seller = facilitator_seller(start_seller, up.url, verify_before_settle=False)
    url = a2a_url(seller)
    task = open_task(url)
    payment = payment_for(seller, buyer, task)
    up.stop()

    failed = task_of(pay(url, task, payment))
    if failed["status"]["state"] == "working":  # the answer's first step: ask for the outcome
        failed = task_of(get(url, task["id"]))
    assert failed["status"]["state"] == "input-required", failed
    metadata = status_metadata(failed)
    assert (metadata[STATUS], metadata[ERROR]) == ("payment-failed", "SETTLEMENT_FAILED")
    assert metadata["x402srv.retryAfterSeconds"] >= 1
    assert metadata["x402srv.problem"]["code"] == "SETTLER_UNAVAILABLE"
    assert required_of(failed)["accepts"], "the task still asks for the payment"
    assert _transfers(seller) == 0

    facilitator(port=port)  # back up, same address: the same payment settles
    paid = task_of(pay(url, task, payment))
    deadline = time.monotonic() + 30
    while paid["status"]["state"] == "working" and time.monotonic() < deadline:
        time.sleep(0.2)
        paid = task_of(get(url, task["id"]))
    assert paid["status"]["state"] == "completed", paid
    assert _transfers(seller) == 1


async def test_paid_but_no_credential_yet_is_working_then_delivered(
    start_seller: Callable[..., Seller],
    tmp_path_factory: pytest.TempPathFactory,
    buyer: LocalAccount,
) -> None:
    seller = start_seller(
        "gas-wallet", **issuer_failing_once(tmp_path_factory.mktemp("a2a-callbacks"))
    )
    url = a2a_url(seller)
    task = open_task(url)
    working = task_of(pay(url, task, payment_for(seller, buyer, task)))
    assert working["status"]["state"] == "working"
    metadata = status_metadata(working)
    assert metadata[STATUS] == "payment-completed"
    [receipt] = metadata[RECEIPTS]
    assert receipt["success"] is True
    assert "seller backend unavailable" not in str(working)

    delivered = task_of(get(url, task["id"]))
    assert delivered["status"]["state"] == "completed"
    grant = grant_of(delivered)
    assert grant["accessToken"] == f"api-key-{grant['challengeId']}"
    assert grant["txHash"] == receipt["transaction"]
    assert _transfers(seller) == 1


async def test_two_instances_on_one_store_answer_for_the_same_task(
    start_seller: Callable[..., Seller],
    tmp_path_factory: pytest.TempPathFactory,
    buyer: LocalAccount,
) -> None:
    shared = tmp_path_factory.mktemp("shared-store") / "x402srv.db"
    store = {"backend": "sqlite", "path": str(shared)}
    first = start_seller("gas-wallet", store=dict(store))
    second = start_seller("gas-wallet", store=dict(store))
    task = open_task(a2a_url(first))
    assert task_of(get(a2a_url(second), task["id"])) == task

    paid = task_of(pay(a2a_url(second), task, payment_for(first, buyer, task)))
    assert paid["status"]["state"] == "completed"
    assert task_of(get(a2a_url(first), task["id"])) == paid
    assert first.balance() == HOURLY  # the task's challenge names the first seller's wallet


# ------------------------------------------------------------------ expiry (in-process clock)


async def test_an_expired_challenge_fails_its_task(
    devchain: Devchain, facilitator_url: str, tmp_path: Path, buyer: LocalAccount
) -> None:
    data_config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=Account.create().address,
        store={"backend": "sqlite", "path": str(tmp_path / "x402srv.db")},
        settlement={"strategy": "facilitator", "facilitator_url": facilitator_url},
        credentials={"secret": JWT_SECRET},
    )
    clock = MovableClock()
    app = create_app(parse_config(data_config, base_dir=tmp_path), clock=clock, name="a2a_clock")

    async def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        envelope = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        _, response = await app.asgi_client.post("/a2a", json=envelope)
        assert response.status == 200
        return dict(response.json)

    opened = task_of(await rpc("message/send", {"message": message(data({"planId": "hourly"}))}))
    payment = signed_payment(buyer, devchain.token, required_of(opened)["accepts"][0])
    clock.advance(901)

    polled = task_of(await rpc("tasks/get", {"id": opened["id"]}))  # asked again: expired
    assert polled["status"]["state"] == "failed"
    metadata = status_metadata(polled)
    assert metadata[STATUS] == "payment-failed"
    assert metadata[ERROR] == "EXPIRED_PAYMENT"
    assert metadata[RECEIPTS] == []
    assert metadata["x402srv.problem"]["code"] == "CHALLENGE_EXPIRED"

    block = devchain.rpc.block_number()
    late = await rpc(
        "message/send",
        {
            "message": message(
                task_id=opened["id"], metadata={STATUS: "payment-submitted", PAYLOAD: payment}
            )
        },
    )
    assert "failed" in error_of(late, -32004)["data"]["detail"]  # a final task takes no more
    request_id = opened["metadata"]["x402srv.requestId"]
    again = await rpc(
        "message/send", {"message": message(data({"planId": "hourly", "requestId": request_id}))}
    )
    assert error_of(again, -32602)["data"]["code"] == "CHALLENGE_EXPIRED"
    assert devchain.rpc.block_number() == block
