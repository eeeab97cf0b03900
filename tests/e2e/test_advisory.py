"""Security regressions of the access endpoint, one named test each (as pyjwt's test_advisory.py).

A grant is a bearer credential (docs/protocol/proof.md): it is handed out only to a caller
that proves the purchase, with its requestId or with the exact signed
authorization stored on the challenge. Each test below is an attack that once
worked against a running server, by someone who reads the chain (from, nonce,
value and the signature are public once the transfer is mined), the
facilitator's logs, or any header. The buyers are the official x402 client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from eth_account.signers.local import LocalAccount

from tests.support.problems import assert_problem
from tests.support.seller import Seller, decode_header
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment
from x402srv.testing.fixtures import FacilitatorProcess

FORGED_SIGNATURE = "0x" + "11" * 65


async def buy(seller: Seller, buyer: LocalAccount, body: dict[str, Any]) -> tuple[Any, Any]:
    """The official client buys; returns (its paid PAYMENT-SIGNATURE, decoded; the grant)."""
    http, recorder = paying_client(buyer)
    async with http:
        response = await http.post(seller.access_url, json=body)
    assert response.status_code == 200, response.text
    return decode_header(recorder.payment_headers()[-1]), response.json()


def forged(paid: dict[str, Any], **extra: str) -> str:
    """The victim's public authorization (from, nonce, value, ...) with a made-up signature."""
    attack = copy.deepcopy(paid)
    attack["payload"]["signature"] = FORGED_SIGNATURE
    attack["accepted"]["extra"] = {**attack["accepted"]["extra"], **extra}
    attack["accepted"]["extra"].pop("requestId", None)  # the attacker never saw it
    return encode_payment(attack)


def assert_no_grant(response: httpx.Response, grant: dict[str, Any]) -> None:
    assert response.status_code != 200, response.text
    assert grant["accessToken"] not in response.text
    assert "accessToken" not in response.text


async def test_forged_signature_on_public_from_nonce_does_not_fetch_a_discovery_grant(
    seller: Seller, buyer: LocalAccount
) -> None:
    """Discovery-first purchase; the attacker replays its on-chain (from, nonce) unsigned."""
    paid, grant = await buy(seller, buyer, {})
    for plan_id in ("hourly", "daily"):
        stolen = httpx.post(
            seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": forged(paid, planId=plan_id)}
        )
        assert_no_grant(stolen, grant)
        assert stolen.status_code in (402, 409), stolen.text
    hourly = httpx.post(
        seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": forged(paid, planId="hourly")}
    )
    problem = assert_problem(hourly, 402, "PAYMENT_FAILED")
    assert problem["reason"] == "invalid_exact_evm_payload_signature"


async def test_forged_signature_with_challenge_id_does_not_fetch_a_challenge_grant(
    seller: Seller, buyer: LocalAccount
) -> None:
    """Challenge-first purchase; the attacker knows the challengeId (it reached a facilitator)."""
    paid, grant = await buy(seller, buyer, {"planId": "hourly"})
    challenge_id = paid["accepted"]["extra"]["challengeId"]
    assert challenge_id == grant["challengeId"]
    for body in ({}, {"planId": "hourly"}):
        stolen = httpx.post(
            seller.access_url,
            json=body,
            headers={"PAYMENT-SIGNATURE": forged(paid, challengeId=challenge_id)},
        )
        assert_no_grant(stolen, grant)
        problem = assert_problem(stolen, 402, "PAYMENT_FAILED")
        assert problem["reason"] == "invalid_exact_evm_payload_signature"


async def test_own_valid_payment_with_a_victims_challenge_id_does_not_fetch_its_grant(
    seller: Seller, buyer: LocalAccount
) -> None:
    """A correctly signed payment of the attacker's own, aimed at someone else's challenge."""
    paid, grant = await buy(seller, buyer, {"planId": "hourly"})
    attacker = seller.chain.new_account()
    accepted = copy.deepcopy(paid["accepted"])
    accepted["extra"].pop("requestId")
    own = signed_payment(attacker, seller.chain.token, accepted)
    block = seller.chain.rpc.block_number()
    stolen = httpx.post(
        seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(own)}
    )
    assert_no_grant(stolen, grant)
    assert_problem(stolen, 409, "TX_ALREADY_REDEEMED")
    assert seller.chain.rpc.block_number() == block, "nothing may be settled for it"


async def test_malleated_copy_of_the_buyers_signature_does_not_fetch_its_grant(
    seller: Seller, buyer: LocalAccount
) -> None:
    """(r, n - s) recovers the same signer, but it is not the stored authorization."""
    paid, grant = await buy(seller, buyer, {"planId": "hourly"})
    signature = bytes.fromhex(paid["payload"]["signature"][2:])
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    s = int.from_bytes(signature[32:64], "big")
    flipped = signature[:32] + (n - s).to_bytes(32, "big") + bytes([55 - signature[64]])
    attack = copy.deepcopy(paid)
    attack["payload"]["signature"] = "0x" + flipped.hex()
    attack["accepted"]["extra"].pop("requestId")
    stolen = httpx.post(
        seller.access_url, json={}, headers={"PAYMENT-SIGNATURE": encode_payment(attack)}
    )
    assert_no_grant(stolen, grant)


async def test_the_buyer_itself_still_fetches_its_grant_both_ways(
    seller: Seller, buyer: LocalAccount
) -> None:
    """The proofs that do work: the exact paid header, and the requestId."""
    for body in ({}, {"planId": "hourly"}):
        paid, grant = await buy(seller, buyer, body)
        again = httpx.post(
            seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": encode_payment(paid)}
        )
        assert again.status_code == 200, again.text
        assert again.json() == grant
        by_request_id = httpx.post(
            seller.access_url, json={"planId": "hourly", "requestId": grant["requestId"]}
        )
        assert by_request_id.json() == grant


@pytest.fixture(scope="module")
def recording_seller(
    start_seller: Callable[..., Seller], facilitator: Callable[..., FacilitatorProcess]
) -> tuple[Seller, FacilitatorProcess]:
    process = facilitator(record=True)
    return start_seller("facilitator", facilitator_url=process.url), process


async def test_challenge_and_request_ids_never_reach_the_facilitator(
    recording_seller: tuple[Seller, FacilitatorProcess], buyer: LocalAccount
) -> None:
    """The official SDK facilitator settles a challenge-first purchase without seeing our ids."""
    seller, process = recording_seller
    paid, grant = await buy(seller, buyer, {"planId": "hourly"})
    assert paid["accepted"]["extra"]["requestId"] == grant["requestId"]  # the buyer had them
    received = process.received()
    assert received, "the facilitator was never asked"
    for raw in received:
        assert grant["challengeId"] not in raw
        assert grant["requestId"] not in raw
        body = json.loads(raw)
        for extra in (
            body["paymentRequirements"]["extra"],
            body["paymentPayload"]["accepted"]["extra"],
        ):
            # What a public discovery offer says (the token's domain, the plan and its
            # terms), never the ids that fetch a grant.
            assert {"name", "version", "planId"} <= set(extra)
            assert not {"challengeId", "requestId"} & set(extra), extra
            assert set(extra) <= {
                "name",
                "version",
                "planId",
                "periodSeconds",
                "calls",
                "rateLimit",
            }
