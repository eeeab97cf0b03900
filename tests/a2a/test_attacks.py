"""The core's payment attacks (``tests/e2e/test_bad_input.py`` ATTACKS), replayed through A2A.

Each attack is signed exactly as over HTTP and sent on a task as
``x402.payment.payload``. Around each one the chain's block number and every
challenge table of the seller's sqlite store are snapshot: nothing may be sent
on-chain and no challenge may change. Verification failures (HTTP 402) answer
``payment-failed`` with the extension's error code, the task back in
``input-required`` with the same PaymentRequired; malformed payments (HTTP 400)
answer -32602 and leave even the task as it was. A payment naming a challenge
that is not the task's (HTTP 400 for an unknown one) is a payment for another
payment request: ``payment-failed`` too, never a JSON-RPC error (docs/protocol/a2a.md).
Both settlement strategies.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.a2a_jsonrpc import (
    ERROR,
    RECEIPTS,
    REQUIRED,
    STATUS,
    a2a_url,
    error_of,
    get,
    grant_of,
    open_task,
    pay,
    payment_for,
    required_of,
    status_metadata,
    task_of,
)
from tests.support.attacks import ATTACKS, Attack, attack_payment
from tests.support.problems import snapshot
from tests.support.seller import Seller
from x402srv.testing.buyers import encode_payment

#: What the extension calls each attack that fails verification (docs/protocol/flow.md, step 5).
EXPECTED_CODES = {
    "wrong payTo": "INVALID_AMOUNT",
    "amount under": "INVALID_AMOUNT",
    "amount over": "INVALID_AMOUNT",
    "accepted amount lowered": "INVALID_AMOUNT",
    "wrong asset": "INVALID_AMOUNT",
    "wrong chain id": "NETWORK_MISMATCH",
    "signed for another chain": "INVALID_SIGNATURE",
    "signed for another token": "INVALID_SIGNATURE",
    "signed by someone else": "INVALID_SIGNATURE",
    "high-s signature": "INVALID_SIGNATURE",
    "validBefore too far ahead": "EXPIRED_PAYMENT",
    "validBefore passed": "EXPIRED_PAYMENT",
    "validAfter in the future": "EXPIRED_PAYMENT",
    # not a malformed request over A2A: a payment made for another payment request
    "unknown challengeId": "INVALID_AMOUNT",
}
#: The x402 reason of each attack that is refused differently over A2A than over HTTP.
A2A_REASONS = {"unknown challengeId": "invalid_payment_requirements"}


def test_every_verification_attack_has_an_expected_code() -> None:
    refused = {a.name for a in ATTACKS if a.status == 402} | set(A2A_REASONS)
    assert refused == set(EXPECTED_CODES)


def challenges(seller: Seller) -> dict[str, list[tuple[Any, ...]]]:
    """Every table but the A2A tasks (a failed payment is written on its task)."""
    return {name: rows for name, rows in snapshot(seller).items() if name != "tasks"}


@contextmanager
def no_transfer_no_challenge_change(seller: Seller) -> Iterator[None]:
    before, block = challenges(seller), seller.chain.rpc.block_number()
    yield
    assert seller.chain.rpc.block_number() == block, "a transaction was sent"
    assert challenges(seller) == before, "a challenge changed"


def attack_payload(
    seller: Seller, buyer: LocalAccount, attack: Attack, accepted: dict[str, Any]
) -> Any:
    """The attack's payment, built as ``test_payment_attacks`` builds its header."""
    payload = attack_payment(buyer, seller.chain.token, attack, accepted)
    # A2A carries the object itself; the header's own damage arrives as a bare string.
    return encode_payment(payload) if attack.raw else payload


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_payment_attacks_over_a2a(seller: Seller, buyer: LocalAccount, attack: Attack) -> None:
    url = a2a_url(seller)
    task = open_task(url)
    payload = attack_payload(seller, buyer, attack, required_of(task)["accepts"][0])
    with no_transfer_no_challenge_change(seller):
        answer = pay(url, task, payload)
    if attack.name not in EXPECTED_CODES:
        error = error_of(answer, -32602)
        assert error["data"]["code"] == attack.code
        assert task_of(get(url, task["id"])) == task  # the task is as it was
        return
    failed = task_of(answer)
    assert failed["status"]["state"] == "input-required"
    metadata = status_metadata(failed)
    assert metadata[STATUS] == "payment-failed"
    assert metadata[ERROR] == EXPECTED_CODES[attack.name]
    assert metadata[REQUIRED] == required_of(task)
    [receipt] = metadata[RECEIPTS]
    assert receipt == {
        "success": False,
        "errorReason": A2A_REASONS.get(attack.name, attack.reason),
        "transaction": "",
        "network": seller.chain.network,
    }
    assert metadata["x402srv.problem"]["code"] == "PAYMENT_FAILED"
    assert task_of(get(url, task["id"])) == failed


@pytest.mark.parametrize("form", ["verbatim", "re-targeted"])
def test_a_redeemed_payment_on_another_task_is_a_duplicate_nonce(
    seller: Seller, buyer: LocalAccount, form: str
) -> None:
    """a2a-x402 9.1: a payment that settled task A, sent on task B, is a spent nonce.

    Verbatim (still naming A's challenge) or with A's ids removed, task B answers
    ``payment-failed`` / ``DUPLICATE_NONCE``: no transfer, no challenge changes,
    and B can still be paid.
    """
    url = a2a_url(seller)
    first = open_task(url)
    payment = payment_for(seller, buyer, first)
    assert task_of(pay(url, first, payment))["status"]["state"] == "completed"

    second = open_task(url)
    replayed = copy.deepcopy(payment)
    if form == "re-targeted":
        for key in ("challengeId", "requestId"):
            replayed["accepted"]["extra"].pop(key)
    with no_transfer_no_challenge_change(seller):
        failed = task_of(pay(url, second, replayed))
    metadata = status_metadata(failed)
    assert failed["status"]["state"] == "input-required"
    assert metadata[STATUS] == "payment-failed"
    assert metadata[ERROR] == "DUPLICATE_NONCE"
    assert metadata[REQUIRED] == required_of(second)  # pay again, same terms
    assert metadata["x402srv.problem"]["code"] == "TX_ALREADY_REDEEMED"

    paid = task_of(pay(url, second, payment_for(seller, buyer, second)))
    assert paid["status"]["state"] == "completed"
    assert grant_of(paid)["challengeId"] == second["metadata"]["x402srv.challengeId"]


def test_a_payment_made_for_another_open_task_is_not_taken(
    seller: Seller, buyer: LocalAccount
) -> None:
    """Signed for task A (not yet paid), sent on task B: refused on B, still good for A."""
    url = a2a_url(seller)
    first, second = open_task(url), open_task(url)
    payment = payment_for(seller, buyer, first)
    with no_transfer_no_challenge_change(seller):
        failed = task_of(pay(url, second, payment))
    assert status_metadata(failed)[ERROR] == "INVALID_AMOUNT"
    assert task_of(pay(url, first, payment))["status"]["state"] == "completed"
