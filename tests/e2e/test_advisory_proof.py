"""Nobody but the buyer fetches a grant: the chain-watcher's thefts, one named test each.

A grant is a bearer credential (docs/design.md, "Who gets a grant"). Once a
payment is mined, its whole authorization and signature are public in the
``transferWithAuthorization`` calldata. What is not public is the ``requestId``
every 402 put in ``accepts[].extra``, which the buyer's client echoed in
``accepted``: only a caller that has it (in the body, or in a payment that is
byte for byte the stored one) gets the grant. Each attack here once worked
against a running server; the attacker reads the chain (and, for the probe, a
challengeId). The buyers are the official x402 client, ``@x402/fetch`` and the
A2A flow, through ``/x402/access`` and a gateway route, and their own retries
still get their grants.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_abi.abi import decode
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from tests.support import a2a_jsonrpc as a2a
from tests.support.apps import AppProcess
from tests.support.gateway import gateway_routes
from tests.support.problems import assert_problem
from tests.support.seller import Seller, decode_header
from x402srv.devchain import Devchain
from x402srv.server.logs import fingerprint
from x402srv.testing.buyers import encode_payment, official_client, paying_client

REPO = Path(__file__).resolve().parents[2]
JUNK_SIGNATURE = "0x" + "11" * 65
#: transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s)
VRS = ["address", "address", "uint256", "uint256", "uint256", "bytes32", "uint8", "bytes32"]
VRS += ["bytes32"]
#: transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, signature)
PACKED = ["address", "address", "uint256", "uint256", "uint256", "bytes32", "bytes"]


# ---------------------------------------------------------------- what the attacker has


def mined_payment(chain: Devchain, tx_hash: str) -> dict[str, Any]:
    """The authorization and signature, read back from the settlement's calldata."""
    tx = chain.rpc.call("eth_getTransactionByHash", [tx_hash])
    data = bytes.fromhex(tx["input"][2:])
    args = data[4:]
    try:
        sender, to, value, after, before, nonce, v, r, s = decode(VRS, args)
        signature = r + s + bytes([v])
    except Exception:  # the other overload: one bytes signature
        sender, to, value, after, before, nonce, signature = decode(PACKED, args)
    return {
        "signature": "0x" + bytes(signature).hex(),
        "authorization": {
            "from": to_checksum_address(sender),
            "to": to_checksum_address(to),
            "value": str(value),
            "validAfter": str(after),
            "validBefore": str(before),
            "nonce": "0x" + bytes(nonce).hex(),
        },
    }


def rebuilt(chain: Devchain, tx_hash: str, accepted: dict[str, Any] | None) -> dict[str, Any]:
    """The buyer's PAYMENT-SIGNATURE as the chain and a public 402 let anyone rebuild it."""
    payload = mined_payment(chain, tx_hash)
    return {"x402Version": 2, "payload": payload, "accepted": accepted}


def public_accepted(offer: dict[str, Any], plan_id: str, request_id: Any) -> dict[str, Any]:
    """A requirement of a 402 the attacker asked for itself, with ``request_id`` in extra
    (``...`` for no extra at all, None for an extra without a requestId)."""
    accepts: list[dict[str, Any]] = offer["accepts"]
    accepted = copy.deepcopy(next(a for a in accepts if a["extra"]["planId"] == plan_id))
    if request_id is ...:
        del accepted["extra"]
    elif request_id is None:
        del accepted["extra"]["requestId"]
    else:
        accepted["extra"]["requestId"] = request_id
    return accepted


def rebuilds(chain: Devchain, tx_hash: str, offer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every rebuild of the buyer's header: without extra, without requestId, with a guess."""
    return {
        name: rebuilt(chain, tx_hash, public_accepted(offer, "hourly", request_id))
        for name, request_id in (
            ("no extra", ...),
            ("no requestId", None),
            ("the attacker's own requestId", offer["accepts"][0]["extra"]["requestId"]),
            ("a guessed requestId", str(uuid.uuid4())),
        )
    }


def assert_nothing_given(response: httpx.Response, grant: dict[str, Any]) -> None:
    """No grant, and no stored id or token in the body or any header."""
    assert response.status_code != 200, response.text
    seen = response.text + json.dumps(dict(response.headers))
    for secret in (grant["accessToken"], grant["requestId"]):
        assert secret not in seen
    if grant["resourceId"] != "default":
        assert grant["resourceId"] not in seen
    assert "accessToken" not in seen
    assert "x-x402-access-token" not in response.headers


# ---------------------------------------------------------------- what the buyer does


async def official_buy(
    url: str, buyer: LocalAccount, body: dict[str, Any] | None = None, method: str = "POST"
) -> tuple[httpx.Response, str]:
    """The official client buys; returns its answer and the PAYMENT-SIGNATURE it paid with."""
    http, recorder = paying_client(buyer)
    async with http:
        response = await http.request(method, url, json=body)
    assert response.status_code == 200, response.text
    return response, recorder.payment_headers()[-1]


def fetch_buy(
    seller: Seller, buyer: LocalAccount, url: str, body: str, method: str = "POST"
) -> dict[str, Any]:
    """``@x402/fetch`` buys (tests/support/fetch_buyer.mjs)."""
    env = {
        **os.environ,
        "ACCESS_URL": url,
        "METHOD": method,
        "BODY": body,
        "NETWORK": seller.chain.network,
        "TOKEN_ADDRESS": seller.chain.token.address,
        "MAX_AMOUNT": "2000000",
        "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
    }
    result = subprocess.run(
        ["node", str(REPO / "tests" / "support" / "fetch_buyer.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200, answer
    assert answer["paymentSignature"], answer
    return answer


# ---------------------------------------------------------------- a gateway route


@pytest.fixture(scope="module")
def gateway(start_seller: Callable[..., Seller], echo_upstream: AppProcess) -> Seller:
    return start_seller("gas-wallet", routes=gateway_routes(echo_upstream.url))


def forwarded_upload(upstream: AppProcess, send: Callable[[], httpx.Response]) -> httpx.Response:
    """``send`` (a request to the gateway's ``/api/_upload``); fails if it reached the upstream."""
    httpx.post(f"{upstream.url}/reset/_upload", content=b"")  # clears what it noted
    response = send()
    received = httpx.get(f"{upstream.url}/_control/received").json()["chunks"]
    assert received == [], "the upstream got the request"
    assert response.status_code != 200, response.text
    return response


# ================================================================ the thefts


async def test_409_detail_never_names_the_victims_request_or_resource(
    seller: Seller, buyer: LocalAccount
) -> None:
    """(from, nonce) from the mined transfer, a junk or the real signature, and a body
    with another resource or plan: once a 409 REQUEST_ID_CONFLICT printed the victim's
    requestId, which then fetched the grant at any time."""
    resource = f"city:victim-{uuid.uuid4().hex[:8]}"
    paid, _ = await official_buy(seller.access_url, buyer, {"resourceId": resource})
    grant = paid.json()
    assert grant["resourceId"] == resource
    header = rebuilds(seller.chain, grant["txHash"], seller.discovery())["no requestId"]
    junk = copy.deepcopy(header)
    junk["payload"]["signature"] = JUNK_SIGNATURE
    for body in ({"resourceId": "x"}, {"planId": "daily"}, {"planId": "hourly"}, {}):
        stolen = httpx.post(
            seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": encode_payment(junk)}
        )
        assert_nothing_given(stolen, grant)
        problem = assert_problem(stolen, 402, "PAYMENT_FAILED")
        assert problem["reason"] == "invalid_exact_evm_payload_signature"
        exact = httpx.post(
            seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": encode_payment(header)}
        )
        assert_nothing_given(exact, grant)
        assert_problem(exact, 409, "TX_ALREADY_REDEEMED")


async def test_409_request_id_conflict_names_nothing_stored(
    seller: Seller, buyer: LocalAccount, request_id: str
) -> None:
    """Whoever knows a challengeId (it is in the 402) and names another plan or resource
    learns nothing stored from the 409."""
    resource = f"city:victim-{uuid.uuid4().hex[:8]}"
    paid, signature = await official_buy(
        seller.access_url, buyer, {"planId": "hourly", "resourceId": resource}
    )
    grant = paid.json()
    probe = decode_header(signature)
    probe["payload"]["signature"] = JUNK_SIGNATURE
    del probe["accepted"]["extra"]["requestId"]
    for body in ({"planId": "daily"}, {"planId": "hourly", "resourceId": "x"}):
        conflict = httpx.post(
            seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": encode_payment(probe)}
        )
        assert_nothing_given(conflict, grant)
        assert conflict.status_code in (402, 409), conflict.text
    # The same answer for anyone's own requestId reused: no stored id in its detail.
    seller.challenge("hourly", requestId=request_id, resourceId=resource)
    reused = httpx.post(seller.access_url, json={"planId": "daily", "requestId": request_id})
    problem = assert_problem(reused, 409, "REQUEST_ID_CONFLICT")
    assert request_id not in reused.text and resource not in reused.text, problem


@pytest.mark.parametrize("body", [{}, {"planId": "hourly"}], ids=["discovery", "challenge"])
async def test_calldata_rebuild_does_not_fetch_the_grant_at_the_access_endpoint(
    seller: Seller, buyer: LocalAccount, body: dict[str, Any]
) -> None:
    """The buyer's exact header rebuilt from the mined calldata, with no extra, no
    requestId, the attacker's own or a guessed one: 409, never the grant."""
    paid, signature = await official_buy(seller.access_url, buyer, body)
    grant = paid.json()
    own = decode_header(signature)
    attacks = rebuilds(seller.chain, grant["txHash"], seller.discovery())
    for name, header in attacks.items():
        assert header["payload"] == own["payload"], "the chain shows the buyer's exact payload"
        for attempt in ({}, {"planId": "hourly"}):
            stolen = httpx.post(
                seller.access_url,
                json=attempt,
                headers={"PAYMENT-SIGNATURE": encode_payment(header)},
            )
            assert_nothing_given(stolen, grant)
            if name == "no extra" and not attempt:  # no plan named at all
                assert_problem(stolen, 400, "TIER_NOT_FOUND")
            else:
                assert_problem(stolen, 409, "TX_ALREADY_REDEEMED")


async def test_calldata_rebuild_is_not_forwarded_at_a_gateway_route(
    gateway: Seller, echo_upstream: AppProcess, buyer: LocalAccount
) -> None:
    """A gateway purchase is discovery-first: its rebuilt header once went upstream as the
    buyer and came back with the buyer's token. Now nothing is forwarded."""
    paid, _ = await official_buy(f"{gateway.server.url}/api/forecast", buyer, {"days": 1})
    grant = decode_header(paid.headers["x-x402-grant"])
    offer = httpx.get(f"{gateway.server.url}/api/forecast")
    assert offer.status_code == 402
    for name, header in rebuilds(gateway.chain, grant["txHash"], offer.json()).items():
        encoded = encode_payment(header)
        answer = forwarded_upload(
            echo_upstream,
            lambda encoded=encoded: httpx.post(  # type: ignore[misc]
                f"{gateway.server.url}/api/_upload",
                content=b"stolen",
                headers={"PAYMENT-SIGNATURE": encoded},
            ),
        )
        assert_nothing_given(answer, grant)
        if name == "no extra":  # no plan named: the route's 402 again
            assert answer.status_code == 402
        else:
            assert_problem(answer, 409, "TX_ALREADY_REDEEMED")


async def test_challenge_id_probe_does_not_fetch_the_grant(
    seller: Seller, buyer: LocalAccount
) -> None:
    """The challengeId (in every 402, never secret) with the rebuilt payment, a junk
    signature, or an empty body: no grant."""
    paid, signature = await official_buy(seller.access_url, buyer, {"planId": "hourly"})
    grant = paid.json()
    challenge_id = decode_header(signature)["accepted"]["extra"]["challengeId"]
    offer = seller.discovery()
    exact = rebuilt(seller.chain, grant["txHash"], public_accepted(offer, "hourly", None))
    exact["accepted"]["extra"]["challengeId"] = challenge_id
    junk = copy.deepcopy(exact)
    junk["payload"]["signature"] = JUNK_SIGNATURE
    for header, status, code in (
        (exact, 409, "TX_ALREADY_REDEEMED"),
        (junk, 402, "PAYMENT_FAILED"),
    ):
        for body in ({}, {"planId": "hourly"}):
            stolen = httpx.post(
                seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": encode_payment(header)}
            )
            assert_nothing_given(stolen, grant)
            assert_problem(stolen, status, code)


async def test_logs_carry_no_request_id_only_its_fingerprint(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """Every transition was logged at INFO with the requestId, a grant-fetch secret."""
    seller = start_seller("gas-wallet")
    grants = []
    for body in ({}, {"planId": "hourly"}):
        paid, _ = await official_buy(seller.access_url, buyer, body)
        grants.append(paid.json())
    conflict = httpx.post(
        seller.access_url, json={"planId": "daily", "requestId": grants[1]["requestId"]}
    )
    assert_problem(conflict, 409, "REQUEST_ID_CONFLICT")
    logs = seller.server.logs()
    for grant in grants:
        assert grant["challengeId"] in logs  # the purchase is logged ...
        assert fingerprint(grant["requestId"]) in logs  # ... and can be found by its id
        assert grant["requestId"] not in logs
        assert grant["accessToken"] not in logs


async def test_logs_carry_no_a2a_task_id_only_its_fingerprint(
    seller: Seller, buyer: LocalAccount
) -> None:
    """An A2A task's id fetches its grant (tasks/get), and a paid task was logged by its id."""
    url = a2a.a2a_url(seller)
    task = a2a.open_task(url)
    done = a2a.task_of(a2a.pay(url, task, a2a.payment_for(seller, buyer, task)))
    assert done["status"]["state"] == "completed", done
    grant = a2a.grant_of(done)

    logs = seller.server.logs()
    assert task["id"] not in logs
    assert grant["challengeId"] in logs  # the purchase is logged ...
    assert fingerprint(task["id"]) in logs  # ... and its task can be found by its id
    assert grant["requestId"] not in logs
    assert grant["accessToken"] not in logs


# ================================================================ the buyers still buy


@pytest.mark.parametrize("body", [{}, {"planId": "hourly"}], ids=["discovery", "challenge"])
async def test_the_official_client_and_its_own_retry_get_the_grant(
    seller: Seller, buyer: LocalAccount, body: dict[str, Any]
) -> None:
    paid, signature = await official_buy(seller.access_url, buyer, body)
    grant = paid.json()
    offered = decode_header(signature)["accepted"]["extra"]["requestId"]
    assert grant["requestId"] == offered  # the discovery-first purchase took the 402's
    again = httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": signature})
    assert again.status_code == 200, again.text
    assert again.json() == grant
    by_id = httpx.post(seller.access_url, json={"planId": "hourly", "requestId": offered})
    assert by_id.json() == grant


async def test_the_official_client_and_its_own_retry_at_a_gateway_route(
    gateway: Seller, buyer: LocalAccount
) -> None:
    url = f"{gateway.server.url}/api/forecast"
    paid, signature = await official_buy(url, buyer, {"days": 2})
    grant = decode_header(paid.headers["x-x402-grant"])
    assert grant["requestId"] == decode_header(signature)["accepted"]["extra"]["requestId"]
    again = httpx.post(url, json={"days": 2}, headers={"PAYMENT-SIGNATURE": signature})
    assert again.status_code == 200, again.text
    assert again.headers["x-x402-access-token"] == grant["accessToken"]
    assert again.json()["raw_path"] == "/api/forecast"  # the upstream answered, once paid


@pytest.mark.parametrize("body", ["{}", '{"planId":"hourly"}'], ids=["discovery", "challenge"])
def test_x402_fetch_and_its_own_retry_get_the_grant(
    seller: Seller, buyer: LocalAccount, body: str
) -> None:
    answer = fetch_buy(seller, buyer, seller.access_url, body)
    grant = answer["body"]
    signature = answer["paymentSignature"]
    assert grant["requestId"] == decode_header(signature)["accepted"]["extra"]["requestId"]
    again = httpx.post(
        seller.access_url,
        content=body,
        headers={"PAYMENT-SIGNATURE": signature, "content-type": "application/json"},
    )
    assert again.status_code == 200, again.text
    assert again.json() == grant


def test_x402_fetch_and_its_own_retry_at_a_gateway_route(
    gateway: Seller, buyer: LocalAccount
) -> None:
    url = f"{gateway.server.url}/api/forecast"
    answer = fetch_buy(gateway, buyer, url, "", method="GET")
    token = answer["headers"]["x-x402-access-token"]
    again = httpx.get(url, headers={"PAYMENT-SIGNATURE": answer["paymentSignature"]})
    assert again.status_code == 200, again.text
    assert again.headers["x-x402-access-token"] == token


@pytest.mark.parametrize("catalog", [True, False], ids=["catalog", "plan"])
async def test_the_a2a_buyer_and_its_own_retry_get_the_grant(
    seller: Seller, buyer: LocalAccount, catalog: bool
) -> None:
    from x402.schemas import PaymentRequired

    url = a2a.a2a_url(seller)
    task = a2a.catalog_task(url) if catalog else a2a.open_task(url)
    required = a2a.required_of(task)
    offered = required["accepts"][0]["extra"]["requestId"]
    payload = await official_client(buyer).create_payment_payload(
        PaymentRequired.model_validate(required)
    )
    payment = payload.model_dump(mode="json", by_alias=True, exclude_none=True)
    done = a2a.task_of(a2a.pay(url, task, payment))
    assert done["status"]["state"] == "completed", done
    grant = a2a.grant_of(done)
    assert grant["requestId"] == offered
    again = a2a.task_of(a2a.pay(url, task, payment))
    assert a2a.grant_of(again) == grant
    if not catalog:
        # The same payment over HTTP names its challenge and proves it by its requestId.
        http = httpx.post(
            seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(payment)}
        )
        assert http.status_code == 200, http.text
        assert http.json() == grant
    # Its calldata rebuilt, without the requestId, is not.
    stolen = rebuilt(
        seller.chain, grant["txHash"], public_accepted(seller.discovery(), "hourly", None)
    )
    refused = httpx.post(
        seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(stolen)}
    )
    assert_nothing_given(refused, grant)
    assert_problem(refused, 409, "TX_ALREADY_REDEEMED")
