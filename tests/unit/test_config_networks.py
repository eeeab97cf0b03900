"""Networks (docs/protocol/config.md), and ``$`` prices converted to the token's atomic units.

The EIP-712 domain and the amount a buyer signs come from here, so a wrong
table entry or a rounded price would make every payment fail or misprice it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.configs import (
    CUSTOM_ASSET,
    CUSTOM_CHAIN_ID,
    config_dict,
    custom_network_dict,
    make_config,
)
from x402srv.config.models import parse_config
from x402srv.errors import ConfigError
from x402srv.wire.networks import KNOWN_NETWORKS, canonical_network_name

BASE_USDC = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
SEPOLIA_USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


def config_error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, env={})
    return str(caught.value)


def on_network(network: str, **sections: Any) -> dict[str, Any]:
    document = config_dict(**sections)
    document["seller"]["network"] = network
    return document


# ---------------------------------------------------------------- named networks


@pytest.mark.parametrize("name", ["base", "mainnet"])
def test_base_and_its_alias(name: str) -> None:
    info = make_config(on_network(name)).network_info
    assert (info.name, info.caip2, info.chain_id) == ("base", "eip155:8453", 8453)
    assert info.asset == BASE_USDC
    assert (info.asset_name, info.asset_version, info.decimals) == ("USD Coin", "2", 6)
    assert info.default_facilitator_url is None
    assert info.rpc_url == "https://mainnet.base.org"


@pytest.mark.parametrize("name", ["base-sepolia", "testnet"])
def test_base_sepolia_and_its_alias(name: str) -> None:
    config = make_config(on_network(name))
    info = config.network_info
    assert config.seller.network == "base-sepolia"
    assert (info.name, info.caip2, info.chain_id) == ("base-sepolia", "eip155:84532", 84532)
    assert info.asset == SEPOLIA_USDC
    assert (info.asset_name, info.asset_version, info.decimals) == ("USDC", "2", 6)
    assert info.default_facilitator_url == "https://x402.org/facilitator"
    assert info.rpc_url == "https://sepolia.base.org"


def test_aliases_resolve_and_other_names_pass_through() -> None:
    assert canonical_network_name("mainnet") == "base"
    assert canonical_network_name("testnet") == "base-sepolia"
    assert canonical_network_name("eip155:1") == "eip155:1"
    assert set(KNOWN_NETWORKS) == {
        "base",
        "base-sepolia",
        "ethereum",
        "sepolia",
        "polygon",
        "polygon-amoy",
        "arbitrum",
        "arbitrum-sepolia",
        "optimism",
        "optimism-sepolia",
        "avalanche",
        "avalanche-fuji",
    }


@pytest.mark.parametrize("name", ["goerli", "Base", "eip155:0", "eip155:", "eip155:abc", ""])
def test_unknown_network_is_refused_listing_the_known_ones(name: str) -> None:
    message = config_error(on_network(name))
    assert "seller.network: unknown network" in message
    assert "(known: base, base-sepolia, ethereum, sepolia, polygon, polygon-amoy," in message
    assert "avalanche-fuji, mainnet, testnet, eip155:<chain id>)" in message


def test_explorer_url_of_a_named_network() -> None:
    info = make_config().network_info
    assert info.explorer_url("0xabc") == "https://sepolia.basescan.org/tx/0xabc"


@pytest.mark.parametrize(
    "table",
    [
        {"asset": CUSTOM_ASSET},
        {"asset_name": "USDC"},
        {"asset_version": "2"},
        {"decimals": 6},
    ],
)
def test_network_asset_keys_are_refused_for_named_networks(table: dict[str, Any]) -> None:
    message = config_error(config_dict(network=table))
    assert "network: the token of base-sepolia is fixed" in message


def test_network_rpc_and_explorer_are_allowed_for_named_networks() -> None:
    config = make_config(
        network={"rpc_url": "https://my-rpc.example.com", "explorer_tx_url": "https://e/{tx}"}
    )
    info = config.network_info
    assert info.asset == SEPOLIA_USDC
    assert info.rpc_url == "https://my-rpc.example.com"
    assert info.explorer_url("0x1") == "https://e/0x1"


def test_settlement_rpc_url_overrides_the_named_networks_rpc() -> None:
    config = make_config(settlement={"rpc_url": "https://override.example.com"})
    assert config.network_info.rpc_url == "https://override.example.com"


def test_network_rpc_url_under_settlement_rpc_url_is_refused() -> None:
    """Only one of the two is read: the other would be a URL the seller thinks is used."""
    message = config_error(
        config_dict(
            settlement={"rpc_url": "https://override.example.com"},
            network={"rpc_url": "https://my-rpc.example.com"},
        )
    )
    assert "network.rpc_url: ignored, because settlement.rpc_url replaces it" in message


# --------------------------------------------------------------- custom networks


def test_custom_network_from_its_table() -> None:
    document = custom_network_dict(asset=CUSTOM_ASSET.lower(), asset_name="Tok", asset_version="7")
    info = make_config(document).network_info
    assert (info.name, info.caip2, info.chain_id) == (
        f"eip155:{CUSTOM_CHAIN_ID}",
        f"eip155:{CUSTOM_CHAIN_ID}",
        CUSTOM_CHAIN_ID,
    )
    assert info.asset == CUSTOM_ASSET  # normalised to its checksum
    assert (info.asset_name, info.asset_version) == ("Tok", "7")
    assert info.decimals == 6  # the default
    assert info.rpc_url == "http://127.0.0.1:8545"
    assert info.default_facilitator_url is None
    assert info.explorer_url("0xabc") is None


def test_custom_network_explorer_placeholder() -> None:
    document = custom_network_dict(explorer_tx_url="http://explorer.local/tx/{tx}")
    assert make_config(document).network_info.explorer_url("0xff") == (
        "http://explorer.local/tx/0xff"
    )


def test_custom_network_without_rpc_has_none() -> None:
    document = custom_network_dict()
    del document["network"]["rpc_url"]
    assert make_config(document).network_info.rpc_url is None


def test_settlement_rpc_url_overrides_the_custom_networks_rpc() -> None:
    document = custom_network_dict()
    del document["network"]["rpc_url"]
    document["settlement"] = {"rpc_url": "http://127.0.0.1:9999"}
    assert make_config(document).network_info.rpc_url == "http://127.0.0.1:9999"


def test_custom_network_needs_a_network_table() -> None:
    message = config_error(on_network("eip155:1337"))
    assert "network: a custom network eip155:1337 needs a [network] table" in message


@pytest.mark.parametrize(
    ("missing", "listed"),
    [
        (["asset"], "asset"),
        (["asset_name", "asset_version"], "asset_name, asset_version"),
        (["asset", "asset_name", "asset_version"], "asset, asset_name, asset_version"),
    ],
)
def test_custom_network_needs_its_token_keys(missing: list[str], listed: str) -> None:
    document = custom_network_dict()
    for key in missing:
        del document["network"][key]
    assert f"network: {listed} required for eip155:{CUSTOM_CHAIN_ID}" in config_error(document)


def test_custom_network_asset_with_a_bad_checksum_is_refused() -> None:
    wrong = CUSTOM_ASSET.replace("afecb", "AFECB")  # mixed case, not the EIP-55 one
    message = config_error(custom_network_dict(asset=wrong))
    assert "network.asset: mixed-case address with a wrong EIP-55 checksum" in message


@pytest.mark.parametrize("decimals", [-1, 37])
def test_custom_network_decimals_out_of_range(decimals: int) -> None:
    assert "network.decimals: " in config_error(custom_network_dict(decimals=decimals))


# -------------------------------------------------------------------- prices


def priced(price: str, decimals: int | None = None) -> dict[str, Any]:
    document = custom_network_dict(decimals) if decimals is not None else config_dict()
    document["plans"] = [{"plan_id": "hourly", "unit_amount": price, "description": "d"}]
    return document


@pytest.mark.parametrize(
    ("price", "decimals", "amount"),
    [
        ("$0.10", None, 100_000),
        ("$1", None, 1_000_000),
        ("$1.50", None, 1_500_000),
        ("$0.000001", None, 1),
        ("$000.5", None, 500_000),
        ("$1234567.123456", None, 1_234_567_123_456),
        ("$0.10", 18, 10**17),
        ("$1", 18, 10**18),
        ("$0.000000000000000001", 18, 1),
        ("$7", 0, 7),
        ("$1.5", 2, 150),
    ],
)
def test_price_to_atomic_units(price: str, decimals: int | None, amount: int) -> None:
    plan = make_config(priced(price, decimals)).plan_map["hourly"]
    assert plan.amount == amount
    assert plan.unit_amount == price


def test_described_amounts_are_atomic_strings() -> None:
    plans = make_config().describe()["resolved"]["plans"]
    assert plans == {"hourly": {"amount": "100000"}, "daily": {"amount": "1500000"}}


@pytest.mark.parametrize(
    ("price", "decimals"),
    [("$0.0000001", None), ("$0.1234567", None), ("$0.1", 0), ("$0.0000000000000000001", 18)],
)
def test_more_decimals_than_the_token_are_refused(price: str, decimals: int | None) -> None:
    message = config_error(priced(price, decimals))
    assert f"plans[0].unit_amount: {price} has more decimals than the token's" in message


@pytest.mark.parametrize("price", ["$0", "$0.00", "$0.000000"])
def test_zero_price_is_refused(price: str) -> None:
    assert "plans[0].unit_amount: must be greater than zero" in config_error(priced(price))


@pytest.mark.parametrize(
    "price",
    [
        "0.10",
        "$",
        "$.10",
        "$1.",
        "$-1",
        "$+1",
        "$1e3",
        "$ 1",
        " $1",
        "1$",
        "$1,000",
        "$1.0.0",
        "USD 1",
        "$0x10",
        "$inf",
        "$NaN",
    ],
)
def test_malformed_prices_are_refused(price: str) -> None:
    message = config_error(priced(price))
    assert 'plans[0].unit_amount: must look like "$0.10"' in message


@pytest.mark.parametrize("price", ["$0.10\n", "$\u0661.\u0665"])
def test_prices_with_a_newline_or_non_ascii_digits_are_refused(price: str) -> None:
    config_error(priced(price))


@pytest.mark.parametrize(
    ("price", "decimals", "amount"),
    [
        ("$12345678901234567890123.456789", None, 12345678901234567890123456789),
        ("$10000000000.000000000000000001", 18, 10**28 + 1),
    ],
)
def test_long_prices_are_converted_exactly(price: str, decimals: int | None, amount: int) -> None:
    assert make_config(priced(price, decimals)).plan_map["hourly"].amount == amount
