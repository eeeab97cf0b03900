"""A seller paid on two anvil chains in three tokens, and the buyers and counts its tests need.

Chain A is the session's anvil (chain id 31337) with its 6-decimal USD token and
a second, 18-decimal one; chain B is an anvil of its own (chain id 31338) with
a 6-decimal token. Settlers are real: facilitator processes running the
official SDK's facilitator code (one good, one answering 500, gated ones), a
URL where nothing listens, and the gas-wallet plugin.

``transfers`` counts what the chains say moved to the seller, independently
of anything the seller reports: the figure every failover test compares with
the grants it got.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.seller import JWT_SECRET
from x402srv.cli import operations
from x402srv.config.models import load_config
from x402srv.devchain import Devchain, TokenInfo, mint, transfer_logs
from x402srv.testing.servers import ServerProcess, free_port

GAS_ENV = "X402SRV_TEST_NETWORKS_GAS_KEY"
#: Short enough for a test, long enough for anvil: the facilitator's read timeout.
READ_TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class Option:
    """One way to pay: a chain and a token on it."""

    chain: Devchain
    token: TokenInfo

    @property
    def network(self) -> str:
        return self.token.network

    @property
    def label(self) -> str:
        return f"{self.network} {self.token.name} ({self.token.decimals} decimals)"


def token_table(token: TokenInfo) -> dict[str, Any]:
    return {
        "asset": token.address,
        "name": token.name,
        "version": token.version,
        "decimals": token.decimals,
    }


def facilitator_settler(url: str) -> dict[str, Any]:
    return {"facilitator_url": url}


GAS_WALLET = {"strategy": "gas-wallet", "gas_wallet_private_key": {"env": GAS_ENV}}


def nothing_listening() -> str:
    """A facilitator URL that refuses every connection."""
    return f"http://127.0.0.1:{free_port()}"


def _settlement(
    networks: list[tuple[Devchain, list[TokenInfo], list[dict[str, Any]]]],
    breaker: dict[str, Any] | None,
) -> dict[str, Any]:
    """Only the tables some settler reads: any other key is a config error (strict config)."""
    settlers = [settler for _, _, listed in networks for settler in listed]
    table: dict[str, Any] = {}
    facilitators = [s for s in settlers if s.get("strategy", "facilitator") == "facilitator"]
    if any("gas_wallet_private_key" not in s for s in facilitators) or not settlers:
        table["facilitator"] = {"read_timeout_seconds": READ_TIMEOUT_SECONDS}
    if breaker is not None or any(len(listed) > 1 for _, _, listed in networks):
        table["circuit_breaker"] = breaker or {"failures": 1000, "cooldown_seconds": 3600}
    return table


def seller_document(
    wallet: str,
    networks: list[tuple[Devchain, list[TokenInfo], list[dict[str, Any]]]],
    *,
    breaker: dict[str, Any] | None = None,
    plans: list[dict[str, Any]] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """A seller TOML document with one ``[[networks]]`` table per chain."""
    document: dict[str, Any] = {
        "seller": {
            "agent_name": "Weather Oracle",
            "agent_description": "Paid hourly weather data",
            "agent_url": "http://127.0.0.1",
            "provider_name": "Example Inc",
            "provider_url": "https://example.com",
            "wallet_address": wallet,
        },
        "plans": plans
        or [
            {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of API access"},
            {"plan_id": "daily", "unit_amount": "$1.50", "description": "One day of API access"},
        ],
        "networks": [
            {
                "network": chain.network,
                "rpc_url": chain.rpc_url,
                "tokens": [token_table(t) for t in tokens],
                "settlers": settlers,
            }
            for chain, tokens, settlers in networks
        ],
        "settlement": _settlement(networks, breaker),
        "store": {"backend": "sqlite", "path": "x402srv.db"},
        "credentials": {"secret": JWT_SECRET},
        "reconciler": {"enabled": False},
        "rate_limit": {"enabled": False},
    }
    document.update(sections)
    return document


def gas_wallet_env(*chains: Devchain) -> dict[str, str]:
    """A fresh gas wallet with ETH on every chain, as the env its settlers read."""
    account: LocalAccount = Account.create()
    for chain in chains:
        chain.fund_eth(account.address, 1000 * 10**18)
    return {GAS_ENV: "0x" + bytes(account.key).hex()}


def start(document: dict[str, Any], directory: Path, env: dict[str, str]) -> ServerProcess:
    return ServerProcess(document, directory, env=env).start()


def funded_buyer(*options: Option) -> LocalAccount:
    """A buyer holding 100 of each option's token (in its own decimals) and no ETH."""
    buyer: LocalAccount = Account.create()
    for option in options:
        amount = 100 * 10**option.token.decimals
        mint(option.chain.rpc, option.token, option.chain.deployer, buyer.address, amount)
    return buyer


def official_buyer_for(buyer: LocalAccount, option: Option) -> Any:
    """The official x402 client of a buyer whose money is in ``option``'s token only."""
    from x402 import x402Client
    from x402.mechanisms.evm.exact import ExactEvmClientScheme
    from x402.mechanisms.evm.signers import EthAccountSigner

    client = x402Client()
    client.register(option.network, ExactEvmClientScheme(EthAccountSigner(buyer)))
    asset = option.token.address.lower()
    client.register_policy(lambda _v, offers: [o for o in offers if o.asset.lower() == asset])
    client.set_spend_controls(False)  # our test tokens are not on the SDK's allow-list
    return client


async def buy_with_official_client(
    access_url: str, buyer: LocalAccount, option: Option, plan_id: str = "hourly"
) -> httpx.Response:
    """A challenge-first purchase by a standard client holding money only in ``option``."""
    from x402.http.clients.httpx import x402AsyncTransport

    transport = x402AsyncTransport(official_buyer_for(buyer, option), httpx.AsyncHTTPTransport())
    async with httpx.AsyncClient(transport=transport, timeout=60) as http:
        return await http.post(access_url, json={"planId": plan_id})


def transfers(options: list[Option], wallet: str) -> list[tuple[str, str, int]]:
    """Every Transfer to ``wallet`` of every option's token: (network, txHash, value)."""
    moved = []
    for option in options:
        for log in transfer_logs(option.chain.rpc, option.token, to=wallet):
            moved.append((option.network, log.tx_hash, log.value))
    return moved


def sender(option: Option, tx_hash: str) -> str:
    """Who sent a transaction (a facilitator's signer, the gas wallet)."""
    tx = option.chain.rpc.call("eth_getTransactionByHash", [tx_hash])
    return str(tx["from"]).lower()


def record(server: ServerProcess, challenge_id: str) -> dict[str, Any]:
    """The record and its history as ``x402srv challenges show`` prints it, as an operator reads it.

    The command's own function on the server's config, in this process: a
    command started for each look would cost more than a second of CPU, on the
    core the servers under test need. (``tests/e2e/test_operations.py`` runs
    the command itself.)
    """
    config = load_config(server.config_path, env={**os.environ, **server.env})
    shown = asyncio.run(operations.show(config, challenge_id))
    return dict(json.loads(json.dumps(shown)))  # what the command prints, read back


def reasons(server: ServerProcess, challenge_id: str) -> list[str]:
    """The record's history, one reason per move."""
    return [str(step["reason"]) for step in record(server, challenge_id)["history"]]


def wait_for_file(path: Path, timeout: float = 60.0) -> None:
    """A gated facilitator's signal (its request arrived, its settle is done)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
