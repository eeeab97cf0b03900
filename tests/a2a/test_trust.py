"""The trust issue's rules over A2A: grants only on proof, unpaid tasks bounded and limited.

- Theft, as over HTTP (``tests/e2e/test_advisory.py``): someone who reads the
  chain copies a buyer's authorization onto a task of their own, with a made-up
  signature or verbatim; the task answers ``payment-failed`` and never holds
  the grant.
- A task nobody paid for is pruned after ``unpaid_retention_hours``;
  ``tasks/get`` then answers -32001 (TaskNotFound).
- Calls without a payment count against the client's unpaid-request limit
  (HTTP 429 with Retry-After past it); a call that carries a payment never does.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    ERROR,
    STATUS,
    a2a_url,
    catalog_task,
    error_of,
    get,
    grant_of,
    message,
    open_task,
    pay,
    payment_for,
    status_metadata,
    task_of,
    text,
)
from tests.support.clock import until_clear_of_a_window_end
from tests.support.seller import Seller
from x402srv.access.reconciler import Reconciler
from x402srv.cli import operations
from x402srv.config.models import load_config

FORGED_SIGNATURE = "0x" + "11" * 65


def bought(seller: Seller, buyer: LocalAccount) -> tuple[dict[str, Any], dict[str, Any]]:
    """A buyer's completed A2A purchase: (its payment, its grant)."""
    url = a2a_url(seller)
    task = open_task(url)
    payment = payment_for(seller, buyer, task)
    done = task_of(pay(url, task, payment))
    assert done["status"]["state"] == "completed", done
    return payment, grant_of(done)


def assert_refused_without_grant(document: dict[str, object], grant: dict[str, object]) -> str:
    task = task_of(document)
    assert task["status"]["state"] == "input-required", task
    assert status_metadata(task)[STATUS] == "payment-failed"
    assert not task.get("artifacts")
    assert str(grant["accessToken"]) not in str(document)
    return str(status_metadata(task)[ERROR])


def test_forged_signature_on_a_victims_authorization_gets_no_grant_over_a2a(
    seller: Seller, buyer: LocalAccount
) -> None:
    payment, grant = bought(seller, buyer)
    url = a2a_url(seller)
    attack = copy.deepcopy(payment)
    attack["payload"]["signature"] = FORGED_SIGNATURE
    mine = open_task(url)
    assert_refused_without_grant(pay(url, mine, attack), grant)


def test_a_victims_exact_payment_on_a_new_task_gets_no_grant_over_a2a(
    seller: Seller, buyer: LocalAccount
) -> None:
    """The whole signed authorization is public once mined; verbatim, it is a spent nonce."""
    payment, grant = bought(seller, buyer)
    url = a2a_url(seller)
    code = assert_refused_without_grant(pay(url, open_task(url), payment), grant)
    assert code == "DUPLICATE_NONCE"


def test_an_unpaid_task_is_pruned_and_then_not_found(
    start_seller: Callable[..., Seller],
) -> None:
    seller = start_seller("gas-wallet", reconciler={"unpaid_retention_hours": 1})
    url = a2a_url(seller)
    hello = catalog_task(url)
    chosen = open_task(url)
    assert task_of(get(url, hello["id"]))["id"] == hello["id"]

    config = load_config(seller.server.config_path, env={**os.environ, **seller.server.env})
    later = time.time() + 3600 + 60

    async def sweep() -> int:
        async with operations.opened(config, clock=lambda: later) as pipeline:
            return (await Reconciler(pipeline, config.reconciler).run_once()).pruned_tasks

    assert asyncio.run(sweep()) >= 2
    for task in (hello, chosen):
        error_of(get(url, task["id"]), -32001)


def test_a2a_calls_without_a_payment_are_limited_and_payments_never(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    seller = start_seller(
        "gas-wallet",
        rate_limit={"unpaid_requests": 2, "window_seconds": 86_400},
    )
    time.sleep(until_clear_of_a_window_end(86_400))
    url = a2a_url(seller)
    task = open_task(url)
    catalog_task(url)
    envelope = {"jsonrpc": "2.0", "id": 3, "method": "message/send"}
    limited = httpx.post(url, json={**envelope, "params": {"message": message(text("hi"))}})
    assert limited.status_code == 429, limited.text
    assert limited.json()["code"] == "RATE_LIMITED"
    assert int(limited.headers["retry-after"]) > 0
    done = task_of(pay(url, task, payment_for(seller, buyer, task)))
    assert done["status"]["state"] == "completed"
    assert grant_of(done)["accessToken"]


@pytest.mark.parametrize("task_id", ["\ud800", "a\x00b", "x" * 300])
def test_an_id_no_store_can_hold_is_not_found_never_internal(seller: Seller, task_id: str) -> None:
    url = a2a_url(seller)

    def ascii_call(method: str, params: dict[str, object]) -> dict[str, Any]:
        """JSON with escapes: a lone surrogate cannot travel any other way."""
        envelope = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer = httpx.post(url, content=json.dumps(envelope).encode("ascii"))
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    error_of(ascii_call("tasks/get", {"id": task_id}), -32001)
    follow = ascii_call("message/send", {"message": message(text("hourly"), task_id=task_id)})
    assert follow["error"]["code"] in (-32001, -32602), follow
    assert "Traceback" not in seller.server.logs()
