"""docs/configuration.md: every key, its default, and the errors that name the key path.

The config is the seller's only interface before the server starts, so a
wrong key must stop it with the exact path (``plans[1].foo: unknown key``)
instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import AGENT_URL, WALLET, config_dict, custom_network_dict, make_config
from x402srv.config.models import load_config, parse_config
from x402srv.errors import ConfigError

Edit = Callable[[dict[str, Any]], None]


def config_error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, env={})
    return str(caught.value)


def edited(edit: Edit, document: dict[str, Any] | None = None) -> dict[str, Any]:
    document = document or config_dict()
    edit(document)
    return document


# ------------------------------------------------------------------ defaults


def test_minimal_config_gets_every_spec_default() -> None:
    document = config_dict()
    del document["credentials"]
    config = make_config(document)
    assert config.seller.agent_version == "1.0.0"
    assert config.plans[0].token_ttl_seconds == 3600
    server = config.server
    assert (server.host, server.port, server.workers) == ("127.0.0.1", 8402, 1)
    assert (server.base_path, server.a2a_path) == ("", "/a2a")
    assert (server.challenge_ttl_seconds, server.max_timeout_seconds) == (900, 300)
    assert (config.store.backend, config.store.path, config.store.url) == (
        "sqlite",
        "x402srv.db",
        None,
    )
    settlement = config.settlement
    assert settlement.strategy is None
    assert settlement.selected_strategy == "facilitator"
    assert settlement.facilitator_url is None
    assert settlement.facilitator_auth is None
    assert settlement.gas_wallet_private_key is None
    assert settlement.rpc_url is None
    credentials = config.credentials
    assert (credentials.issuer, credentials.algorithm) == ("jwt", "HS256")
    assert credentials.secret is None
    assert credentials.private_key is None
    assert credentials.audience is None
    assert credentials.callback is None
    assert config.network is None


def test_every_spec_key_is_accepted_with_its_value() -> None:
    document = config_dict(
        server={
            "host": "::1",
            "port": 9000,
            "workers": 4,
            "base_path": "/pay",
            "a2a_path": "/rpc",
            "challenge_ttl_seconds": 60,
            "max_timeout_seconds": 120,
        },
        store={"backend": "redis", "url": "redis://127.0.0.1:6379/0"},
        settlement={
            "strategy": "facilitator",
            "facilitator_url": "https://x402.org/facilitator",
            "facilitator_auth": "fac-token",
            "rpc_url": "https://sepolia.base.org",
        },
        credentials={
            "issuer": "jwt",
            "algorithm": "EdDSA",
            "private_key": "pem",
            "audience": "https://aud.example.com",
            "kid": "k1",
        },
    )
    document["seller"]["agent_version"] = "2.1.0"
    document["plans"][0]["token_ttl_seconds"] = 60
    config = make_config(document)
    assert config.seller.agent_version == "2.1.0"
    assert config.plans[0].token_ttl_seconds == 60
    assert (
        config.server.model_dump(exclude={"cors_origins", "readiness_cache_seconds"})
        == document["server"]
    )
    assert config.store.backend == "redis"
    assert config.store.url is not None
    assert config.store.url.reveal() == "redis://127.0.0.1:6379/0"
    settlement = config.settlement
    assert settlement.selected_strategy == "facilitator"
    for key in ("facilitator_url", "facilitator_auth", "rpc_url"):
        assert getattr(settlement, key).reveal() == document["settlement"][key]
    credentials = config.credentials
    assert (credentials.issuer, credentials.algorithm) == ("jwt", "EdDSA")
    assert credentials.audience == "https://aud.example.com"
    assert credentials.kid == "k1"
    # The keys of the other choices, each in the context that reads it.
    other = make_config(
        config_dict(
            store={"backend": "sqlite", "path": "other.db"},
            settlement={"strategy": "gas-wallet", "gas_wallet_private_key": "0x" + "ab" * 32},
            credentials={
                "issuer": "callback",
                "callback": "mypkg.creds:fetch_resource_credentials",
            },
        )
    )
    assert other.store.path == "other.db"
    assert other.settlement.selected_strategy == "gas-wallet"
    assert other.credentials.callback == "mypkg.creds:fetch_resource_credentials"
    assert config.access_url == f"{AGENT_URL}/pay/x402/access"


def test_access_url_without_base_path() -> None:
    assert make_config().access_url == f"{AGENT_URL}/x402/access"


# ------------------------------------------------------------- unknown keys


def _set(path: str, value: Any) -> Edit:
    def edit(document: dict[str, Any]) -> None:
        *tables, key = path.split(".")
        target = document
        for table in tables:
            target = target.setdefault(table, {})
        target[key] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(_set("prot", 1), "prot: unknown key", id="top-level"),
        pytest.param(_set("seller.prot", 1), "seller.prot: unknown key", id="seller"),
        pytest.param(_set("server.prot", 8402), "server.prot: unknown key", id="server"),
        pytest.param(
            lambda d: d["plans"][1].update(foo=1), "plans[1].foo: unknown key", id="plans[1]"
        ),
        pytest.param(
            lambda d: d["plans"][0].update(bar="x"), "plans[0].bar: unknown key", id="plans[0]"
        ),
        pytest.param(_set("store.prot", 1), "store.prot: unknown key", id="store"),
        pytest.param(_set("settlement.prot", "x"), "settlement.prot: unknown key", id="settle"),
        pytest.param(_set("credentials.prot", True), "credentials.prot: unknown key", id="creds"),
    ],
)
def test_unknown_key_is_an_error_naming_its_path(edit: Edit, expected: str) -> None:
    message = config_error(edited(edit))
    assert message.startswith("invalid configuration:")
    assert expected in message


def test_unknown_key_in_network_table_names_its_path() -> None:
    document = custom_network_dict(explorer="https://x")
    assert "network.explorer: unknown key" in config_error(document)


def test_several_errors_are_all_reported() -> None:
    document = edited(_set("server.prot", 1))
    document["plans"][1]["foo"] = 1
    message = config_error(document)
    assert "server.prot: unknown key" in message
    assert "plans[1].foo: unknown key" in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d["seller"].pop("agent_name"), "seller.agent_name: required key is missing"),
        (lambda d: d["seller"].pop("wallet_address"), "seller.wallet_address: required key"),
        (lambda d: d.pop("seller"), "seller: required key is missing"),
        (lambda d: d.pop("plans"), "plans: required key is missing"),
        (lambda d: d["plans"][1].pop("unit_amount"), "plans[1].unit_amount: required key"),
        (lambda d: d.update(plans=[]), "plans: "),
    ],
)
def test_missing_required_key_names_its_path(edit: Edit, expected: str) -> None:
    assert expected in config_error(edited(edit))


def test_wrong_type_names_its_path() -> None:
    assert "server.port: " in config_error(edited(_set("server.port", "eighty")))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("server.port", 0),
        ("server.port", 65536),
        ("server.workers", 0),
        ("server.challenge_ttl_seconds", 0),
        ("server.max_timeout_seconds", 0),
    ],
)
def test_out_of_range_server_numbers_are_refused(key: str, value: int) -> None:
    assert f"{key}: " in config_error(edited(_set(key, value)))


def test_zero_token_ttl_is_refused() -> None:
    document = edited(lambda d: d["plans"][0].update(token_ttl_seconds=0))
    assert "plans[0].token_ttl_seconds: " in config_error(document)


# ------------------------------------------------------------------ plan ids


@pytest.mark.parametrize("plan_id", ["a", "Hourly.v2_b-9", "x" * 64])
def test_valid_plan_ids(plan_id: str) -> None:
    config = make_config(edited(lambda d: d["plans"][0].update(plan_id=plan_id)))
    assert plan_id in config.plan_map


@pytest.mark.parametrize(
    "plan_id",
    [
        "",
        "x" * 65,
        "has space",
        "slash/no",
        "colon:no",
        "caf\u00e9",
        pytest.param("hourly\n"),
    ],
)
def test_invalid_plan_ids_are_refused(plan_id: str) -> None:
    message = config_error(edited(lambda d: d["plans"][0].update(plan_id=plan_id)))
    assert "plans[0].plan_id: must match [A-Za-z0-9._-]{1,64}" in message


def test_duplicate_plan_id_is_refused_with_the_second_path() -> None:
    document = edited(lambda d: d["plans"][1].update(plan_id="hourly"))
    assert "plans[1].plan_id: duplicate plan id 'hourly'" in config_error(document)


def test_plans_keep_their_order() -> None:
    assert list(make_config().plan_map) == ["hourly", "daily"]


# ----------------------------------------------------------- wallet address


@pytest.mark.parametrize("address", [WALLET, WALLET.lower(), "0x" + WALLET[2:].upper()])
def test_checksummed_lowercase_and_uppercase_wallets_are_normalised(address: str) -> None:
    config = make_config(edited(lambda d: d["seller"].update(wallet_address=address)))
    assert config.seller.wallet_address == WALLET


def test_wallet_with_a_wrong_checksum_is_refused() -> None:
    wrong = WALLET[:-1] + WALLET[-1].lower()  # "...287C" -> "...287c": mixed case, bad EIP-55
    assert wrong != WALLET
    message = config_error(edited(lambda d: d["seller"].update(wallet_address=wrong)))
    assert "seller.wallet_address: mixed-case address with a wrong EIP-55 checksum" in message


@pytest.mark.parametrize(
    "address",
    [WALLET[2:], WALLET[:-2], WALLET + "00", "0x" + "g" * 40, "0X" + WALLET[2:], ""],
)
def test_malformed_wallets_are_refused(address: str) -> None:
    message = config_error(edited(lambda d: d["seller"].update(wallet_address=address)))
    assert "seller.wallet_address: must be a 0x-prefixed 20-byte hex address" in message


# --------------------------------------------------------------------- URLs


def test_agent_url_with_trailing_slash_is_refused() -> None:
    document = edited(lambda d: d["seller"].update(agent_url=AGENT_URL + "/"))
    assert "seller.agent_url: must not end with '/'" in config_error(document)


@pytest.mark.parametrize("url", ["ftp://api.example.com", "api.example.com", "https://"])
def test_agent_url_must_be_http(url: str) -> None:
    document = edited(lambda d: d["seller"].update(agent_url=url))
    assert "seller.agent_url: must be an http(s) URL" in config_error(document)


@pytest.mark.parametrize("suffix", ["?x=1", "#frag"])
def test_agent_url_with_a_query_or_fragment_is_refused(suffix: str) -> None:
    config_error(edited(lambda d: d["seller"].update(agent_url=AGENT_URL + suffix)))


def test_agent_url_may_have_a_path() -> None:
    config = make_config(edited(lambda d: d["seller"].update(agent_url=AGENT_URL + "/v1")))
    assert config.access_url == f"{AGENT_URL}/v1/x402/access"


def test_provider_url_may_end_with_a_slash() -> None:
    config = make_config(edited(lambda d: d["seller"].update(provider_url="https://e.com/")))
    assert config.seller.provider_url == "https://e.com/"


# -------------------------------------------------------------------- paths


@pytest.mark.parametrize("path", ["", "/pay", "/pay/v1", "/a.b_c~d-e"])
def test_valid_base_paths(path: str) -> None:
    assert make_config(edited(_set("server.base_path", path))).server.base_path == path


@pytest.mark.parametrize(
    "path",
    [
        "pay",
        "/pay/",
        "/",
        "//pay",
        "/pa y",
        "/pay?x=1",
        pytest.param("/pay\n"),
    ],
)
def test_invalid_base_paths_are_refused(path: str) -> None:
    assert "server.base_path: " in config_error(edited(_set("server.base_path", path)))


@pytest.mark.parametrize("path", ["/a2a", "/rpc/v1"])
def test_valid_a2a_paths(path: str) -> None:
    assert make_config(edited(_set("server.a2a_path", path))).server.a2a_path == path


@pytest.mark.parametrize("path", ["", "a2a", "/a2a/", "/"])
def test_invalid_a2a_paths_are_refused(path: str) -> None:
    assert "server.a2a_path: " in config_error(edited(_set("server.a2a_path", path)))


# --------------------------------------------------------- strategy choice


@pytest.mark.parametrize(
    ("settlement", "selected"),
    [
        ({}, "facilitator"),
        ({"gas_wallet_private_key": "0x" + "11" * 32}, "gas-wallet"),
        ({"strategy": "gas-wallet"}, "gas-wallet"),
        ({"strategy": "my-plugin"}, "my-plugin"),
    ],
)
def test_selected_strategy(settlement: dict[str, Any], selected: str) -> None:
    assert make_config(settlement=settlement).settlement.selected_strategy == selected


def test_describe_shows_the_selected_strategy() -> None:
    config = make_config(settlement={"gas_wallet_private_key": "0x" + "11" * 32})
    assert config.describe()["settlement"]["strategy"] == "gas-wallet"


# ----------------------------------------------------- plugin option tables


def test_plugin_option_tables_are_accepted_and_handed_out() -> None:
    config = make_config(
        store={"backend": "redis", "redis": {"url": "redis://h:6379/0", "pool": {"size": 4}}},
        settlement={"strategy": "acme", "acme": {"region": "eu"}},
        credentials={"issuer": "vault", "vault": {"mount": "kv"}},
    )
    assert config.store.plugin_tables() == ["redis"]
    assert config.store.plugin_options("redis") == {
        "url": "redis://h:6379/0",
        "pool": {"size": 4},
    }
    assert config.store.plugin_options("absent") == {}
    assert config.settlement.plugin_options("acme") == {"region": "eu"}
    assert config.credentials.plugin_options("vault") == {"mount": "kv"}


@pytest.mark.parametrize("section", ["store", "settlement", "credentials"])
def test_scalar_unknown_key_in_a_plugin_section_is_refused(section: str) -> None:
    message = config_error(edited(_set(f"{section}.redis_url", "redis://h")))
    assert f"{section}.redis_url: unknown key" in message


def test_the_seller_table_takes_no_plugin_tables() -> None:
    assert "seller.extra: unknown key" in config_error(edited(_set("seller.extra", {"a": 1})))


# ---------------------------------------------------------------- load_config


def test_load_config_reads_toml_and_resolves_relative_to_its_directory(tmp_path: Path) -> None:
    file = tmp_path / "seller.toml"
    file.write_text(
        "[seller]\n"
        'agent_name = "A"\nagent_description = "D"\n'
        f'agent_url = "{AGENT_URL}"\nprovider_name = "P"\n'
        'provider_url = "https://example.com"\n'
        f'wallet_address = "{WALLET.lower()}"\nnetwork = "testnet"\n'
        '[[plans]]\nplan_id = "p"\nunit_amount = "$2"\ndescription = "d"\n'
    )
    config = load_config(file, env={})
    assert config.base_dir == tmp_path.resolve()
    assert config.seller.wallet_address == WALLET
    assert config.network_info.name == "base-sepolia"
    assert config.plan_map["p"].amount == 2_000_000


def test_toml_syntax_error_is_a_config_error(tmp_path: Path) -> None:
    file = tmp_path / "broken.toml"
    file.write_text('[seller\nagent_name = "x"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(file, env={})


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    file = tmp_path / "latin1.toml"
    file.write_bytes(b'[seller]\nagent_name = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(file, env={})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "absent.toml", env={})


def test_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path, env={})


def test_valid_toml_with_a_bad_key_names_the_path(tmp_path: Path) -> None:
    file = tmp_path / "seller.toml"
    file.write_text("[server]\nprot = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(file, env={})
    assert "server.prot: unknown key" in str(caught.value)
    assert "seller: required key is missing" in str(caught.value)
