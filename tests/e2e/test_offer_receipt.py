"""Signed offers and receipts (docs/offer-receipt.md), checked by ``@x402/extensions`` itself.

A real seller on anvil signs with an EIP-712 (secp256k1) key or a JWS (Ed25519)
key; the official Python client buys; the TypeScript SDK's own verify functions
(``tests/support/offer_receipt_verify.mjs``, in Node) accept every offer of the
402 and the receipt of ``PAYMENT-RESPONSE`` and of the AccessGrant, and refuse
each of them once a signed field is changed. A JWS is verified with the key its
``kid`` names: the verifier resolves did:web by fetching the seller's did.json.
"""

from __future__ import annotations

import base64
import copy
import csv
import io
import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.console import ADMIN_TOKEN, Console, console_pages
from tests.support.paths import REPO
from tests.support.seller import Seller, decode_header
from x402srv.testing import launcher
from x402srv.testing.buyers import paying_client

SIGNING_KEY = Account.create()


def ed25519_pem() -> str:
    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


@pytest.fixture(scope="module", params=["eip712", "jws"])
def signing_seller(request: pytest.FixtureRequest, start_seller: Callable[..., Seller]) -> Seller:
    key = "0x" + bytes(SIGNING_KEY.key).hex() if request.param == "eip712" else ed25519_pem()
    table = {"format": request.param, "key": key, "include_tx_hash": True}
    admin = {"token": ADMIN_TOKEN, "prefix": "/ops"}  # the console shows receipts
    return start_seller("gas-wallet", real_card_url=True, offer_receipt=table, admin=admin)


def verify(items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each item through @x402/extensions' verify function for its kind and format."""
    document = {"items": [{"kind": kind, "value": value} for kind, value in items]}
    result = subprocess.run(
        ["node", str(REPO / "tests" / "support" / "offer_receipt_verify.mjs")],
        input=json.dumps(document),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def tampered(signed: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """The same signed object with one signed field changed."""
    changed = copy.deepcopy(signed)
    if signed["format"] == "eip712":
        changed["payload"][field] = value
        return changed
    header, payload, signature = signed["signature"].split(".")
    fields = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    fields[field] = value
    encoded = base64.urlsafe_b64encode(json.dumps(fields).encode()).rstrip(b"=").decode()
    changed["signature"] = f"{header}.{encoded}.{signature}"
    return changed


def accepted(result: dict[str, Any], signed: dict[str, Any]) -> bool:
    """What a verifier accepting it means: valid, and (EIP-712) recovered to our key."""
    if not result["ok"]:
        return False
    return bool(signed["format"] == "jws" or result["signer"] == SIGNING_KEY.address)


def test_offer_receipt_every_402_offer_verifies_and_a_tampered_one_does_not(
    signing_seller: Seller,
) -> None:
    answer = httpx.post(signing_seller.access_url, json={"planId": "hourly"})
    assert answer.status_code == 402
    required = decode_header(answer.headers["payment-required"])
    extension = required["extensions"]["offer-receipt"]
    offers = extension["info"]["offers"]
    assert len(offers) == len(required["accepts"]) and extension["schema"]["required"] == ["offers"]
    assert answer.json()["extensions"] == required["extensions"]
    discovery = decode_header(
        httpx.post(signing_seller.access_url, json={}).headers["payment-required"]
    )
    items = [
        ("offer", offer)
        for offer in [*offers, *discovery["extensions"]["offer-receipt"]["info"]["offers"]]
    ]
    results = verify([*items, ("offer", tampered(offers[0], "amount", "1"))])
    for (_, offer), result in zip(items, results, strict=False):
        assert accepted(result, offer), result
        payload = result["payload"]
        assert payload["resourceUrl"] == signing_seller.access_url
        accept = (required if offer in offers else discovery)["accepts"][offer["acceptIndex"]]
        for field in ("scheme", "network", "asset", "payTo", "amount"):
            assert payload[field] == accept[field]
    assert not accepted(results[-1], offers[0])


async def test_offer_receipt_the_receipt_in_payment_response_and_grant_verifies(
    signing_seller: Seller, buyer: LocalAccount
) -> None:
    http, _ = paying_client(buyer)
    async with http:
        response = await http.post(signing_seller.access_url, json={"planId": "hourly"})
    assert response.status_code == 200, response.text
    grant = response.json()
    settled = decode_header(response.headers["payment-response"])
    receipt = settled["extensions"]["offer-receipt"]["info"]["receipt"]
    assert receipt == grant["receipt"]
    [ours, forged] = verify(
        [("receipt", receipt), ("receipt", tampered(receipt, "payer", SIGNING_KEY.address))]
    )
    assert accepted(ours, receipt), ours
    assert ours["payload"]["payer"] == buyer.address
    assert ours["payload"]["network"] == grant["network"]
    assert ours["payload"]["transaction"] == grant["txHash"]  # include_tx_hash = true
    assert not accepted(forged, receipt)
    # export-sales writes it too, for the seller's books.
    server = signing_seller.server
    exported = launcher.run(
        ["export-sales", "--config", "seller.toml", "--from", "0"],
        cwd=server.directory,
        env={**os.environ, **server.env},
    )
    assert exported.returncode == 0, exported.stderr
    rows = {row["challengeId"]: row for row in csv.DictReader(io.StringIO(exported.stdout))}
    assert json.loads(rows[grant["challengeId"]]["receipt"]) == receipt
    # And the seller's console: the purchase's API view and its page.
    console = Console(signing_seller, f"{signing_seller.server.url}/ops")
    assert console.ok(f"/purchases/{grant['challengeId']}")["receipt"] == receipt
    [page] = console_pages(console, f"/purchases/{grant['challengeId']}")
    assert 'id="receipt"' in page and receipt["format"] in page


def test_offer_receipt_the_key_is_published_in_did_json(signing_seller: Seller) -> None:
    document = httpx.get(f"{signing_seller.server.url}/.well-known/did.json").json()
    [method] = document["verificationMethod"]
    assert document["assertionMethod"] == [method["id"]]
    port = signing_seller.server.url.rsplit(":", 1)[1]
    assert document["id"] == f"did:web:127.0.0.1%3A{port}"
    if "blockchainAccountId" in method:
        assert method["blockchainAccountId"] == f"eip155:1:{SIGNING_KEY.address}"
    else:
        assert method["publicKeyJwk"]["crv"] == "Ed25519"
