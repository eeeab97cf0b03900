"""One real x402srv process on the three example plugins; the official x402 client buys.

The store is ``audit`` over sqlite, the settler ``relayer`` (a relaying account
sends the transfer on anvil), the issuer ``key-service`` (the key service of
``conftest``). The plugin tables are those of ``seller.toml``, the file the docs
show; only the chain, the wallet and the URLs are this test's.
"""

from __future__ import annotations

import json
import os
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from x402srv_example.testing import KeyService

from x402srv.testing import launcher
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess

if TYPE_CHECKING:
    from x402srv.devchain import Devchain

ADMIN_TOKEN_ENV = "KEY_SERVICE_ADMIN_TOKEN"
#: The seller config the docs show; the tests serve its plugin tables as written.
SELLER_TOML = Path(__file__).resolve().parents[1] / "seller.toml"


@dataclass
class Seller:
    server: ServerProcess
    wallet: str
    relayer: str

    @property
    def audit_log(self) -> Path:
        return self.server.directory / "audit.jsonl"


def served_config(
    devchain: Devchain, wallet: str, relayer: str, key_service: KeyService
) -> dict[str, Any]:
    """``seller.toml`` on this test's chain: the plugin tables as written, new addresses."""
    config = tomllib.loads(SELLER_TOML.read_text())
    config["seller"].update(wallet_address=wallet, network=devchain.network)
    config["network"] = {
        "asset": devchain.token.address,
        "asset_name": "USD Coin",
        "asset_version": "2",
        "rpc_url": devchain.rpc_url,
    }
    config["settlement"]["relayer"].update(signer_url=devchain.rpc_url, account=relayer)
    config["credentials"]["key-service"]["url"] = key_service.url
    return config


@pytest.fixture(scope="module")
def seller(
    devchain: Devchain,
    key_service: KeyService,
    relaying_account: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Seller]:
    wallet = devchain.new_account(eth=0, usdc_atomic=0).address
    config = served_config(devchain, wallet, relaying_account, key_service)
    server = ServerProcess(
        config,
        tmp_path_factory.mktemp("example-seller"),
        env={ADMIN_TOKEN_ENV: key_service.admin_token},
    )
    with server:
        yield Seller(server, wallet, relaying_account)


def test_the_docs_seller_toml_checks(tmp_path: Path) -> None:
    """``x402srv check`` builds all three plugins from the file as the docs show it."""
    result = launcher.run(
        ["check", "--config", str(SELLER_TOML)],
        env={**os.environ, ADMIN_TOKEN_ENV: "an-admin-token"},
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert described["store"]["backend"] == "audit"
    assert described["settlement"]["strategy"] == "relayer"
    assert described["credentials"]["issuer"] == "key-service"


async def test_a_purchase_on_the_three_example_plugins(
    seller: Seller, devchain: Devchain, key_service: KeyService
) -> None:
    buyer = devchain.new_account(eth=0)  # the buyer signs; the relaying account pays gas
    body = {"planId": "hourly", "requestId": str(uuid.uuid4())}
    client, _ = paying_client(buyer)
    async with client:
        response = await client.post(seller.server.access_url, json=body)
    assert response.status_code == 200, response.text
    grant = response.json()

    # key-service: the grant holds the key the seller's service minted, once
    minted = key_service.minted[grant["challengeId"]]
    assert (grant["accessToken"], grant["tokenType"]) == (minted["key"], "Bearer")
    assert key_service.mint_calls == 1

    # relayer: one transfer from the buyer, in a transaction the relaying account sent
    [transfer] = devchain.transfer_logs(to=seller.wallet)
    assert (transfer.from_address.lower(), transfer.value) == (buyer.address.lower(), 100_000)
    assert transfer.tx_hash == grant["txHash"]
    sent = devchain.rpc.call("eth_getTransactionByHash", [grant["txHash"]])
    assert sent["from"].lower() == seller.relayer.lower()

    # audit: every state change of the challenge, in order, the txHash once paid
    lines = [json.loads(line) for line in seller.audit_log.read_text().splitlines()]
    mine = [line for line in lines if line["challengeId"] == grant["challengeId"]]
    moves = [line["to"] for line in mine]
    assert [state for i, state in enumerate(moves) if moves[i - 1 : i] != [state]] == [
        "PENDING",  # (a SETTLING or PAID line repeats for a hand-over, the broadcast
        "SETTLING",  # txHash, the delivery claim: each is a change of the record)
        "PAID",
        "DELIVERED",
    ]
    assert (mine[0]["from"], mine[0]["reason"]) == (None, "created")
    assert mine[-1]["txHash"] == grant["txHash"]

    # a replay is the stored grant: no new key, no new transfer
    again = httpx.post(seller.server.access_url, json=body)
    assert again.json() == grant
    assert key_service.mint_calls == 1
    assert len(devchain.transfer_logs(to=seller.wallet)) == 1

    # and the seller's API takes the key
    api = httpx.get(
        f"{key_service.url}/weather", headers={"Authorization": f"Bearer {grant['accessToken']}"}
    )
    assert api.json() == {"forecast": "sunny", "plan": "hourly"}


async def test_a_payment_the_token_would_refuse_is_never_sent(
    seller: Seller, devchain: Devchain
) -> None:
    """The relayer's preflight refuses an unfunded buyer: nothing is sent, nothing is spent."""
    sent_before = devchain.rpc.call("eth_getTransactionCount", [seller.relayer, "latest"])
    client, _ = paying_client(devchain.new_account(eth=0, usdc_atomic=0))
    async with client:
        response = await client.post(seller.server.access_url, json={"planId": "hourly"})
    assert response.status_code == 402, response.text
    problem = response.json()
    assert (problem["code"], problem["reason"]) == (
        "PAYMENT_FAILED",
        "invalid_exact_evm_insufficient_balance",
    )
    assert devchain.rpc.call("eth_getTransactionCount", [seller.relayer, "latest"]) == sent_before
