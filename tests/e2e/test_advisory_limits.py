"""Security regressions of the unpaid-request limit, one named test each (as test_advisory.py).

The limit (docs/operations.md, "Unpaid traffic") bounds what anyone can make a
seller store or compute without paying: each client gets ``unpaid_requests``
per window, then 429 RATE_LIMITED. Each test below is a way around it that
once worked against a running server:

- an A2A message with the key ``x402.payment.payload`` in its metadata, any
  value, was taken for a payment and never counted, yet it opened a task and a
  PENDING challenge;
- the client was the first entry of ``client_ip_header``, which the client
  writes itself behind any proxy that appends (rotate it: a new client each
  time); now it is the ``trusted_hops``-th entry from the right, or the peer;
- a payment that failed (a made-up signature: an ecrecover and a store read
  each) was never counted.

A paying buyer is never limited: each test ends with the buyer's real payment,
from the limited client, going through. Every server, proxy and upstream here is
a real process; the buyers sign with real keys on the session's anvil.
"""

from __future__ import annotations

import copy
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    PAYLOAD,
    STATUS,
    a2a_url,
    data,
    grant_of,
    message,
    open_task,
    pay,
    payment_for,
    status_metadata,
    task_of,
)
from tests.support.apps import AppProcess
from tests.support.cli import check
from tests.support.clock import until_clear_of_a_window_end
from tests.support.configs import config_dict
from tests.support.problems import assert_problem
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import encode_payment, signed_payment

LIMIT = 4
#: A day: its window ends mid-test only at midnight UTC, and ``limited_seller`` waits
#: that out (``until_clear_of_a_window_end``).
WINDOW = 86_400
FORGED_SIGNATURE = "0x" + "11" * 65


def limited_seller(start_seller: Callable[..., Seller], **rate_limit: Any) -> Seller:
    """A seller limiting unpaid requests to ``LIMIT`` a day, with a minute of its day left."""
    seller = start_seller(
        "gas-wallet",
        rate_limit={"unpaid_requests": LIMIT, "window_seconds": WINDOW, **rate_limit},
    )
    time.sleep(until_clear_of_a_window_end(WINDOW))
    return seller


def assert_limited(response: httpx.Response) -> None:
    assert_problem(response, 429, "RATE_LIMITED")
    assert int(response.headers["retry-after"]) > 0


def stored(seller: Seller) -> tuple[int, int]:
    """(tasks, challenges) in the seller's sqlite store."""
    with sqlite3.connect(seller.server.directory / "x402srv.db") as db:
        tasks = db.execute("SELECT count(*) FROM tasks").fetchone()[0]
        challenges = db.execute("SELECT count(*) FROM challenges").fetchone()[0]
    return int(tasks), int(challenges)


def forged(payment: dict[str, Any]) -> dict[str, Any]:
    """A well-formed payment for the right requirement, with a made-up signature."""
    junk = copy.deepcopy(payment)
    junk["payload"]["signature"] = FORGED_SIGNATURE
    return junk


def rpc(url: str, msg: dict[str, Any], **kwargs: Any) -> httpx.Response:
    envelope = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": msg}}
    return httpx.post(url, json=envelope, timeout=60, **kwargs)


# ------------------------------------------------------------------ A2A metadata key


def test_a2a_payment_payload_key_alone_does_not_skip_the_unpaid_limit(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """A message is a payment only if it is a payment submission the pipeline can read.

    Each of these once opened a task and a PENDING challenge uncounted.
    """
    seller = limited_seller(start_seller)
    url = a2a_url(seller)
    task = open_task(url)  # 1 of LIMIT
    before = stored(seller)
    plan = data({"planId": "hourly"})
    payment = payment_for(seller, buyer, task)
    dodges = [
        # a payment submission, but on no task: it fails, and a failed payment counts
        message(task_id="no-such-task", metadata={STATUS: "payment-submitted", PAYLOAD: payment}),
        message(plan, metadata={PAYLOAD: "junk"}),
        message(plan, metadata={PAYLOAD: {"x402Version": 2}}),
        message(plan, metadata={PAYLOAD: payment}),  # a real payload, but no status
        message(plan, metadata={STATUS: "payment-rejected", PAYLOAD: payment}),
        message(plan, metadata={STATUS: "payment-submitted", PAYLOAD: payment}),  # no task
        message(task_id=task["id"], metadata={STATUS: "payment-submitted", PAYLOAD: "junk"}),
        message(task_id=task["id"], metadata={STATUS: "payment-submitted", PAYLOAD: None}),
        message(plan, metadata={PAYLOAD: None}),
    ]
    answers = [rpc(url, dodge) for dodge in dodges]
    statuses = [answer.status_code for answer in answers]
    assert statuses == [200] * (LIMIT - 1) + [429] * (len(dodges) - LIMIT + 1), statuses
    for answer in answers[LIMIT - 1 :]:
        assert_limited(answer)
    tasks, challenges = stored(seller)
    assert tasks - before[0] <= LIMIT - 1
    assert challenges - before[1] <= LIMIT - 1

    # the buyer's real payment submission is never counted or refused
    done = task_of(pay(url, task, payment))
    assert done["status"]["state"] == "completed", done
    assert grant_of(done)["accessToken"]


# ------------------------------------------------------------------ who the client is


def test_rotating_forwarded_for_does_not_dodge_the_limit_of_a_direct_client(
    start_seller: Callable[..., Seller],
) -> None:
    """No proxy configured: the peer address counts, whatever headers the client writes."""
    seller = limited_seller(start_seller)
    answers = [
        httpx.post(
            seller.access_url,
            json={},
            headers={"X-Forwarded-For": f"198.51.100.{n}", "X-Real-IP": f"203.0.113.{n}"},
        )
        for n in range(LIMIT + 3)
    ]
    assert [a.status_code for a in answers] == [402] * LIMIT + [429] * 3
    assert_limited(answers[-1])


@pytest.fixture(scope="module")
def proxied(
    start_seller: Callable[..., Seller], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Seller, str]]:
    """A seller behind one appending proxy (``trusted_hops = 1``); (seller, proxy URL)."""
    seller = limited_seller(start_seller, client_ip_header="X-Forwarded-For", trusted_hops=1)
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    proxy = AppProcess(
        "tests.integrations.apps.forwarding_proxy:app",
        log,
        env={"X402SRV_TEST_UPSTREAM": seller.server.url},
    ).start()
    yield seller, proxy.url + seller.access_url.removeprefix(seller.server.url)
    proxy.stop()


def from_address(source: str) -> httpx.Client:
    """A client whose connections come from ``source`` (a loopback address of its own)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30)


def test_rotating_forwarded_for_behind_a_trusted_proxy_does_not_dodge_the_limit(
    proxied: tuple[Seller, str],
) -> None:
    """The proxy appends the address it saw; what the client wrote before it never counts."""
    _, url = proxied
    with from_address("127.0.0.2") as mallory, from_address("127.0.0.3") as alice:
        answers = [
            mallory.post(url, json={}, headers={"X-Forwarded-For": f"198.51.100.{n}"})
            for n in range(LIMIT + 3)
        ]
        assert [a.status_code for a in answers] == [402] * LIMIT + [429] * 3
        assert_limited(answers[-1])
        # one entry, several, another header line: the client's own entries never count
        for spoof in ("10.1.2.3", "10.1.2.3, 10.4.5.6", "127.0.0.3"):
            assert_limited(mallory.post(url, json={}, headers={"X-Forwarded-For": spoof}))
        # another client behind the same proxy (one peer address) is counted on its own
        assert alice.post(url, json={}).status_code == 402


def test_forwarded_for_without_trusted_hops_is_refused_by_check(tmp_path: Path) -> None:
    """The old first-hop reading is gone: a config that relied on it stops at ``check``."""
    document = config_dict(rate_limit={"client_ip_header": "X-Forwarded-For"})
    result = check(tmp_path, document)
    assert result.returncode == 2, result.stdout
    assert "rate_limit.trusted_hops: required with client_ip_header" in result.stderr


# ------------------------------------------------------------------ junk payments


def test_junk_signature_payments_get_429_after_the_threshold_at_the_access_endpoint(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    seller = limited_seller(start_seller)
    payment = seller.pay_with(buyer, "hourly")  # 1 of LIMIT
    body = {"planId": "hourly"}
    junk = {"PAYMENT-SIGNATURE": encode_payment(forged(payment.document))}
    answers = [httpx.post(seller.access_url, json=body, headers=junk) for _ in range(LIMIT + 2)]
    assert [a.status_code for a in answers] == [402] * (LIMIT - 1) + [429] * 3
    assert_problem(answers[0], 402, "PAYMENT_FAILED")
    assert_limited(answers[-1])
    # and unpaid requests are over the limit too: the junk was counted as theirs
    assert_limited(httpx.post(seller.access_url, json={}))

    paid = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": payment.header})
    assert paid.status_code == 200, paid.text


def test_copies_of_a_mined_payment_get_429_after_the_threshold_at_the_access_endpoint(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """A real signature read from the chain, with another requestId: 409, and counted."""
    seller = limited_seller(start_seller)
    payment = seller.pay_with(buyer, "hourly")  # 1 of LIMIT
    body = {"planId": "hourly"}
    paid = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": payment.header})
    assert paid.status_code == 200, paid.text  # a paying request is never counted
    rebuilt = copy.deepcopy(payment.document)
    rebuilt["accepted"]["extra"]["requestId"] = "0b5e7c1e-9a4d-4f6b-8c2d-3e4f5a6b7c8d"
    headers = {"PAYMENT-SIGNATURE": encode_payment(rebuilt)}
    answers = [httpx.post(seller.access_url, json=body, headers=headers) for _ in range(LIMIT + 2)]
    assert [a.status_code for a in answers] == [409] * (LIMIT - 1) + [429] * 3
    assert_problem(answers[0], 409, "TX_ALREADY_REDEEMED")
    assert_limited(answers[-1])


def test_junk_signature_payments_get_429_after_the_threshold_at_the_gateway(
    start_seller: Callable[..., Seller], echo_upstream: AppProcess, buyer: LocalAccount
) -> None:
    seller = start_seller(
        "gas-wallet",
        routes=[{"prefix": "/api", "upstream": echo_upstream.url}],
        rate_limit={"unpaid_requests": LIMIT, "window_seconds": WINDOW},
    )
    time.sleep(until_clear_of_a_window_end(WINDOW))
    url = seller.server.url + "/api/forecast"
    offer = httpx.get(url)  # 1 of LIMIT
    assert offer.status_code == 402
    required = decode_header(offer.headers["payment-required"])
    payment = signed_payment(buyer, seller.chain.token, required["accepts"][0])
    # a payment for a plan the route does not sell: nothing is tried, an unpaid 402 (2 of LIMIT)
    elsewhere = forged(payment)
    elsewhere["accepted"]["extra"]["planId"] = "weekly"
    refused = httpx.get(url, headers={"PAYMENT-SIGNATURE": encode_payment(elsewhere)})
    assert refused.status_code == 402
    junk = {"PAYMENT-SIGNATURE": encode_payment(forged(payment))}
    answers = [httpx.get(url, headers=junk) for _ in range(LIMIT + 1)]
    assert [a.status_code for a in answers] == [402] * (LIMIT - 2) + [429] * 3
    assert_limited(answers[-1])

    paid = httpx.get(url, headers={"PAYMENT-SIGNATURE": encode_payment(payment)})
    assert paid.status_code == 200, paid.text
    assert paid.json()["path"] == "/api/forecast"  # forwarded to the upstream


def test_junk_signature_payments_get_429_after_the_threshold_over_a2a(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    seller = limited_seller(start_seller)
    url = a2a_url(seller)
    task = open_task(url)  # 1 of LIMIT
    payment = payment_for(seller, buyer, task)
    junk = {STATUS: "payment-submitted", PAYLOAD: forged(payment)}
    answers = [rpc(url, message(task_id=task["id"], metadata=junk)) for _ in range(LIMIT + 2)]
    assert [a.status_code for a in answers] == [200] * (LIMIT - 1) + [429] * 3
    failed = task_of(answers[0].json())
    assert status_metadata(failed)[STATUS] == "payment-failed"
    assert_limited(answers[-1])

    done = task_of(pay(url, task, payment))
    assert done["status"]["state"] == "completed", done
