"""Configs and signed payments for in-process tests (unit, ops), built without a chain.

Configs are plain dicts, as ``tomllib`` would hand them to ``parse_config``;
every builder returns a fresh deep copy so a test can edit it freely. Payments
are signed for real with ``x402srv.devchain.sign_transfer_authorization``; the
token is a ``TokenInfo`` built by hand, so no chain is needed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.config.models import Config, parse_config
from x402srv.devchain import TokenInfo, sign_transfer_authorization
from x402srv.wire.eip712 import Eip3009Domain
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.protocol import requirement

AGENT_URL = "https://api.example.com"
WALLET = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
JWT_SECRET = "unit-test-jwt-secret-" + "k" * 32
#: Base Sepolia USDC (docs/networks.md).
SEPOLIA_USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
#: A custom (anvil-like) chain and its token.
CUSTOM_CHAIN_ID = 31337
CUSTOM_ASSET = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
#: 2023-11-14T22:13:20Z, the "now" of every payment check.
NOW = 1_700_000_000
#: Deterministic keys: the tests must not depend on a random draw.
BUYER: LocalAccount = Account.from_key("0x" + "7e" * 32)
STRANGER: LocalAccount = Account.from_key("0x" + "5a" * 32)

_SELLER: dict[str, Any] = {
    "agent_name": "Weather Oracle",
    "agent_description": "Paid hourly weather data",
    "agent_url": AGENT_URL,
    "provider_name": "Example Inc",
    "provider_url": "https://example.com",
    "wallet_address": WALLET,
    "network": "base-sepolia",
}

_PLANS: list[dict[str, Any]] = [
    {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of API access"},
    {
        "plan_id": "daily",
        "unit_amount": "$1.50",
        "description": "One day of API access",
        "token_ttl_seconds": 86400,
    },
]


def config_dict(**sections: Any) -> dict[str, Any]:
    """A valid config document on base-sepolia; keyword sections replace whole tables."""
    document: dict[str, Any] = {
        "seller": copy.deepcopy(_SELLER),
        "plans": copy.deepcopy(_PLANS),
        "credentials": {"secret": JWT_SECRET},
    }
    document.update(copy.deepcopy(sections))
    return document


def custom_network_dict(decimals: int | None = None, **network: Any) -> dict[str, Any]:
    """A valid config on the custom chain ``eip155:31337`` with its ``[network]`` table."""
    table: dict[str, Any] = {
        "asset": CUSTOM_ASSET,
        "asset_name": "USD Coin",
        "asset_version": "2",
        "rpc_url": "http://127.0.0.1:8545",
        **network,
    }
    if decimals is not None:
        table["decimals"] = decimals
    document = config_dict(network=table)
    document["seller"]["network"] = f"eip155:{CUSTOM_CHAIN_ID}"
    return document


def make_config(
    document: dict[str, Any] | None = None, *, base_dir: Path | None = None, **sections: Any
) -> Config:
    """``parse_config`` with an empty environment: no test reads the real one by accident.

    Relative paths in the config (the sqlite file) are read from ``base_dir``.
    """
    return parse_config(document or config_dict(**sections), base_dir=base_dir, env={})


def custom_config() -> Config:
    return make_config(custom_network_dict())


def token_for(network: NetworkInfo) -> TokenInfo:
    """The token a buyer signs for: the EIP-712 domain of ``network``."""
    return TokenInfo(
        address=network.asset,
        name=network.asset_name,
        version=network.asset_version,
        decimals=network.decimals,
        chain_id=network.chain_id,
    )


def domain_for(network: NetworkInfo) -> Eip3009Domain:
    """The domain the server builds from config (as the pipeline does)."""
    return Eip3009Domain(
        name=network.asset_name,
        version=network.asset_version,
        chain_id=network.chain_id,
        verifying_contract=network.asset,
    )


def offered_for(config: Config, plan_id: str = "hourly") -> dict[str, Any]:
    """The requirement the server offers for ``plan_id`` (discovery form)."""
    return requirement(
        network=config.network_info,
        amount=config.plan_map[plan_id].amount,
        pay_to=config.seller.wallet_address,
        max_timeout_seconds=config.server.max_timeout_seconds,
        plan_id=plan_id,
    )


def signed_payment(
    offered: dict[str, Any],
    token: TokenInfo,
    *,
    signer: LocalAccount = BUYER,
    to: str | None = None,
    value: int | None = None,
    valid_after: int = NOW - 60,
    valid_before: int = NOW + 120,
    nonce: bytes = b"\x42" * 32,
) -> dict[str, Any]:
    """A ``PAYMENT-SIGNATURE`` document paying ``offered``, signed for real by ``signer``."""
    signature, authorization = sign_transfer_authorization(
        signer,
        token,
        to=to or offered["payTo"],
        value=int(offered["amount"]) if value is None else value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=nonce,
    )
    return {
        "x402Version": 2,
        "payload": {"signature": signature, "authorization": authorization},
        "accepted": copy.deepcopy(offered),
    }
