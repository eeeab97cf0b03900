"""The TOML side: selection through the entry point, and errors that name their key."""

from __future__ import annotations

from typing import Any

import pytest
from x402srv_gaswallet import GasWalletSettler
from x402srv_gaswallet.testing import Configure, StartSettler

from x402srv.config.models import Config
from x402srv.errors import ConfigError
from x402srv.interfaces import Settler
from x402srv.server.registry import Registry


def test_the_installed_entry_point_registers_gas_wallet(config: Config) -> None:
    registry = Registry()

    built = registry.build(config)

    assert "gas-wallet" in registry.names("settler")
    assert isinstance(built.settler, GasWalletSettler)
    assert isinstance(built.settler, Settler)
    assert built.settler.name == "gas-wallet"


def test_a_gas_wallet_key_alone_selects_the_strategy(configure: Configure) -> None:
    config = configure(strategy=None)

    assert isinstance(Registry().build(config).settler, GasWalletSettler)


def _build_error(config: Config) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        Registry().build(config)
    return caught.value


def test_the_private_key_is_required(configure: Configure) -> None:
    config = configure(gas_key=None)

    error = _build_error(config)

    assert error.path == "settlement.gas_wallet_private_key"


def test_a_key_that_is_not_a_key_is_refused_without_quoting_it(configure: Configure) -> None:
    config = configure(gas_key="0x" + "zz" * 32)

    error = _build_error(config)

    assert error.path == "settlement.gas_wallet_private_key"
    assert "zz" not in str(error)


def test_an_rpc_is_required(configure: Configure) -> None:
    config = configure(rpc_url=None)

    error = _build_error(config)

    assert error.path == "settlement.rpc_url"


@pytest.mark.parametrize(
    ("options", "lease_seconds", "key"),
    [
        ({"receipt_timeout_seconds": 90}, 120, "receipt_timeout_seconds"),
        ({"receipt_timeout_seconds": 20}, 30, "receipt_timeout_seconds"),
        (
            {"nonce_lease_seconds": 60, "receipt_timeout_seconds": 10},
            120,
            "receipt_timeout_seconds",
        ),
    ],
)
def test_a_receipt_wait_that_would_outlive_the_settling_lease_is_refused(
    configure: Configure, options: dict[str, Any], lease_seconds: int, key: str
) -> None:
    config = configure(options=options, lease_seconds=lease_seconds)

    error = _build_error(config)

    assert error.path == f"settlement.gas-wallet.{key}"
    assert "lease_seconds" in str(error)


@pytest.mark.parametrize(
    "options",
    [
        {"receipt_timeout": 5},  # a typo
        {"poll_interval_seconds": 0},
        {"max_fee_per_gas_gwei": -1},
        {"rpc_timeout_seconds": 10, "nonce_lease_seconds": 5},
    ],
)
def test_bad_options_name_their_table(configure: Configure, options: dict[str, Any]) -> None:
    config = configure(options=options)

    error = _build_error(config)

    assert "settlement.gas-wallet." in str(error)


async def test_start_refuses_a_node_on_another_chain(
    configure: Configure, start_settler: StartSettler
) -> None:
    config = configure(network="eip155:8453")

    with pytest.raises(ConfigError) as caught:
        await start_settler(config)

    assert caught.value.path == "settlement.rpc_url"
    assert "chain 31337" in str(caught.value) and "8453" in str(caught.value)


async def test_start_refuses_a_node_it_cannot_reach(
    configure: Configure, start_settler: StartSettler
) -> None:
    config = configure(
        rpc_url="http://127.0.0.1:9/rpc/SECRET-API-KEY", options={"rpc_timeout_seconds": 0.5}
    )

    with pytest.raises(ConfigError) as caught:
        await start_settler(config)

    assert caught.value.path == "settlement.rpc_url"
    assert "cannot be reached" in str(caught.value)
    assert "SECRET-API-KEY" not in str(caught.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"nonce_retries": "3"},
            'settlement.gas-wallet.nonce_retries: expected an integer, got a string "3"',
        ),
        ({"nonce_retries": True}, "settlement.gas-wallet.nonce_retries: expected an integer"),
        (
            {"gas_limit": 50_000.0},
            "settlement.gas-wallet.gas_limit: expected an integer, got a float",
        ),
        (
            {"receipt_timeout_seconds": "30"},
            "settlement.gas-wallet.receipt_timeout_seconds: expected a number",
        ),
        (
            {"max_fee_per_gas_gwei": "1.5"},
            "settlement.gas-wallet.max_fee_per_gas_gwei: expected a number",
        ),
        (
            {"max_fee_per_gas_gwei": True},
            "settlement.gas-wallet.max_fee_per_gas_gwei: expected a number",
        ),
    ],
)
def test_options_are_strict(configure: Configure, options: dict[str, Any], expected: str) -> None:
    """Docs/configuration.md: a value of another type is refused, never converted."""
    error = _build_error(configure(options=options))

    assert expected in str(error)


def test_a_fee_cap_is_a_toml_number(configure: Configure) -> None:
    config = configure(options={"max_fee_per_gas_gwei": 1.5})
    settler = Registry().build(config).settler
    assert isinstance(settler, GasWalletSettler)
