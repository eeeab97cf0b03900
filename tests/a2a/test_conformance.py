"""What the A2A TCK (0.3.x, mandatory) checks, as our own tests named after the spec.

The kit cannot run here (it is a repository, not a package); these take over
its checks on the behaviours it found missing: a message naming no plan gets a
Task the client can continue, history and historyLength, tasks/get and
tasks/cancel on such a task. The JSON-RPC envelope cases (including requests
without an id) are in ``test_errors``, streaming in ``test_streaming``.
Every Task is validated with ``a2a-sdk``'s v0.3 models.
"""

from __future__ import annotations

import json

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    PAYLOAD,
    RECEIPTS,
    REQUIRED,
    STATUS,
    a2a_url,
    call,
    catalog_task,
    data,
    get,
    grant_of,
    message,
    send,
    status_metadata,
    task_of,
    text,
)
from tests.support.purchase import HOURLY, check_grant
from tests.support.seller import Seller
from x402srv.testing.buyers import signed_payment


def test_a2a_0_3_s7_1_a_message_naming_no_plan_opens_a_task(seller: Seller) -> None:
    """message/send "Hello" -> a Task (input-required) with every plan, asking for one."""
    task = catalog_task(a2a_url(seller), text("Hello from TCK!"))
    assert task["kind"] == "task"
    [words, offer] = task["status"]["message"]["parts"]
    assert "Which plan" in words["text"]
    assert [plan["planId"] for plan in offer["data"]["plans"]] == ["hourly", "daily"]
    metadata = status_metadata(task)
    assert metadata[STATUS] == "payment-required"
    assert [a["extra"]["planId"] for a in metadata[REQUIRED]["accepts"]] == ["hourly", "daily"]
    assert "artifacts" not in task


def test_a2a_0_3_s7_1_continuing_the_task(seller: Seller) -> None:
    """A follow-up on the same task (taskId) is answered with that task, still asking."""
    url = a2a_url(seller)
    task = catalog_task(url)
    again = task_of(send(url, message(text("Follow-up message"), task_id=task["id"])))
    assert again["id"] == task["id"]
    assert again["contextId"] == task["contextId"]
    assert again["status"] == task["status"]


def test_a2a_0_3_s7_1_naming_a_plan_on_the_task_asks_for_its_payment(seller: Seller) -> None:
    url = a2a_url(seller)
    task = catalog_task(url)
    chosen = task_of(send(url, message(text("The daily one"), task_id=task["id"])))
    assert chosen["id"] == task["id"]
    assert chosen["status"]["state"] == "input-required"
    [accepted] = status_metadata(chosen)[REQUIRED]["accepts"]
    assert accepted["extra"]["planId"] == "daily"
    assert accepted["extra"]["challengeId"] == chosen["metadata"]["x402srv.challengeId"]
    assert "x402srv.skill" not in status_metadata(chosen)
    # the plan is chosen for good: naming another one now changes nothing
    later = task_of(send(url, message(text("hourly, actually"), task_id=task["id"])))
    assert later["status"] == chosen["status"]


def test_a2a_x402_s5_3_paying_an_offer_of_the_catalog_directly(
    seller: Seller, buyer: LocalAccount
) -> None:
    """The catalog task is a standalone payment request: paying one offer buys that plan."""
    url = a2a_url(seller)
    task = catalog_task(url)
    hourly = status_metadata(task)[REQUIRED]["accepts"][0]
    payment = signed_payment(buyer, seller.chain.token, hourly)
    metadata = {STATUS: "payment-submitted", PAYLOAD: payment}
    before = seller.balance()
    paid = task_of(send(url, message(text("pay"), task_id=task["id"], metadata=metadata)))
    assert paid["status"]["state"] == "completed"
    grant = grant_of(paid)
    check_grant(grant, seller)
    assert grant["planId"] == "hourly"
    assert paid["metadata"]["x402srv.requestId"] == grant["requestId"]
    assert status_metadata(paid)[RECEIPTS][0]["transaction"] == grant["txHash"]
    assert seller.balance() - before == HOURLY
    # history keeps the payment message, but not the signed authorization
    stored = task_of(get(url, task["id"]))
    [submitted] = [m for m in stored["history"] if m["role"] == "user" and "metadata" in m]
    assert submitted["metadata"] == {STATUS: "payment-submitted"}
    assert payment["payload"]["signature"] not in json.dumps(stored)


def test_a2a_0_3_s6_4_history_keeps_the_conversation(seller: Seller) -> None:
    """User messages and the agent's earlier statuses, oldest first; no payment signature."""
    url = a2a_url(seller)
    first = message(text("Initial message for history test"))
    task = task_of(send(url, first))
    follow_ups = [message(text(f"Follow-up {n}"), task_id=task["id"]) for n in range(3)]
    for follow_up in follow_ups:
        task_of(send(url, follow_up))
    history = task_of(get(url, task["id"]))["history"]
    assert [m["messageId"] for m in history] == [m["messageId"] for m in (first, *follow_ups)]
    assert {m["role"] for m in history} == {"user"}

    chosen = task_of(send(url, message(data({"planId": "hourly"}), task_id=task["id"])))
    roles = [m["role"] for m in chosen["history"]]
    assert roles == ["user"] * 4 + ["agent", "user"]  # the catalog status, then the choice
    assert chosen["history"][4]["metadata"]["x402srv.skill"] == "discover-products"


@pytest.mark.parametrize("length", [0, 1, 2, 10])
def test_a2a_0_3_s7_3_tasks_get_honours_history_length(seller: Seller, length: int) -> None:
    url = a2a_url(seller)
    task = catalog_task(url)
    for n in range(3):
        send(url, message(text(f"Follow-up {n}"), task_id=task["id"]))
    full = task_of(get(url, task["id"]))["history"]
    assert len(full) == 4
    limited = task_of(call(url, "tasks/get", {"id": task["id"], "historyLength": length}))
    if length == 0:
        assert "history" not in limited
    else:
        assert limited["history"] == full[-length:]


def test_a2a_0_3_s7_1_message_send_honours_history_length(seller: Seller) -> None:
    params = {"message": message(text("hi")), "configuration": {"historyLength": 0}}
    assert "history" not in task_of(call(a2a_url(seller), "message/send", params))


def test_a2a_0_3_s7_4_canceling_a_task_that_waits_for_a_plan(seller: Seller) -> None:
    url = a2a_url(seller)
    task = catalog_task(url)
    canceled = task_of(call(url, "tasks/cancel", {"id": task["id"]}))
    assert canceled["id"] == task["id"]
    assert canceled["status"]["state"] == "canceled"
    assert task_of(get(url, task["id"]))["status"]["state"] == "canceled"
