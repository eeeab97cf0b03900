"""Secrets in the config (docs/protocol/config.md): a string, ``{env = ...}`` or ``{file = ...}``.

Security regressions are named tests: a secret value must never show in
``repr``/``str``, ``describe()`` (what ``x402srv check`` prints),
``model_dump(mode="json")`` or a ``ConfigError`` message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import CUSTOM_ASSET, config_dict, custom_network_dict, make_config
from x402srv.config.models import Config, Secret, load_config, parse_config, redact_url
from x402srv.config.secrets import shown_url
from x402srv.errors import ConfigError

# Distinctive values: a leak of any of them anywhere is caught by a substring search.
ENV_SECRET = "env-secret-value-7f3a9c" + "e" * 16
FILE_SECRET = "file-secret-value-0b1d2e" + "f" * 16
INLINE_SECRET = "inline-secret-value-93ac" + "i" * 16
URL_PASSWORD = "urlpassword4471"
URL_KEY = "alchemykey58c2"
GAS_KEY = "0x" + "c0ffee" * 10 + "abcd"


def config_error(document: dict[str, Any], env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, env=env or {})
    return str(caught.value)


# -------------------------------------------------------------- the Secret type


def test_secret_reveals_only_on_request() -> None:
    secret = Secret(INLINE_SECRET, "env X")
    assert secret.reveal() == INLINE_SECRET
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", secret.describe()):
        assert INLINE_SECRET not in shown
        assert "env X" in shown


def test_secrets_compare_by_value_not_source() -> None:
    assert Secret("a", "inline") == Secret("a", "env A")
    assert Secret("a") != Secret("b")
    assert Secret("a") != "a"
    assert hash(Secret("a")) == hash(Secret("a", "file f"))


# ------------------------------------------------------------- three sources


def test_inline_string_secret() -> None:
    secret = make_config(credentials={"secret": INLINE_SECRET}).credentials.secret
    assert secret is not None
    assert (secret.reveal(), secret.source) == (INLINE_SECRET, "inline")


def test_env_secret_reads_the_given_environment() -> None:
    config = parse_config(
        config_dict(credentials={"secret": {"env": "JWT"}}), env={"JWT": ENV_SECRET}
    )
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == ENV_SECRET
    assert config.credentials.secret.source == "env JWT"


def test_env_secret_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X402SRV_UNIT_TEST_SECRET", ENV_SECRET)
    config = parse_config(config_dict(credentials={"secret": {"env": "X402SRV_UNIT_TEST_SECRET"}}))
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == ENV_SECRET


def write_config(directory: Path, secret_table: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / "seller.toml"
    file.write_text(
        "[seller]\n"
        'agent_name = "A"\nagent_description = "D"\n'
        'agent_url = "https://api.example.com"\nprovider_name = "P"\n'
        'provider_url = "https://example.com"\n'
        'wallet_address = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"\n'
        'network = "base-sepolia"\n'
        '[[plans]]\nplan_id = "p"\nunit_amount = "$1"\ndescription = "d"\n'
        f"[credentials]\nsecret = {secret_table}\n"
    )
    return file


def test_file_secret_is_relative_to_the_config_files_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = write_config(tmp_path / "conf", '{ file = "secrets/jwt.txt" }')
    (tmp_path / "conf" / "secrets").mkdir()
    (tmp_path / "conf" / "secrets" / "jwt.txt").write_text(f"  {FILE_SECRET}\n\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory must not matter
    config = load_config(Path("..") / "conf" / "seller.toml", env={})
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == FILE_SECRET  # surrounding whitespace stripped
    assert config.credentials.secret.source == "file secrets/jwt.txt"
    assert file.exists()


def test_file_secret_with_an_absolute_path(tmp_path: Path) -> None:
    secret_file = tmp_path / "abs-secret"
    secret_file.write_text(FILE_SECRET)
    file = write_config(tmp_path / "conf", f"{{ file = {json.dumps(str(secret_file))} }}")
    config = load_config(file, env={})
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == FILE_SECRET


def test_load_config_passes_env_through(tmp_path: Path) -> None:
    file = write_config(tmp_path, '{ env = "MY_JWT" }')
    config = load_config(file, env={"MY_JWT": ENV_SECRET})
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == ENV_SECRET


# ----------------------------------------------------------------- failures


SECRET_SLOTS = [
    ("store", "url"),
    ("settlement", "facilitator_url"),
    ("settlement", "facilitator_auth"),
    ("settlement", "gas_wallet_private_key"),
    ("settlement", "rpc_url"),
    ("credentials", "secret"),
    ("credentials", "private_key"),
    ("network", "rpc_url"),
]


def with_secret(section: str, key: str, value: Any) -> dict[str, Any]:
    document = custom_network_dict() if section == "network" else config_dict()
    document.setdefault(section, {})[key] = value
    return document


@pytest.mark.parametrize(("section", "key"), SECRET_SLOTS)
def test_missing_env_var_names_the_key_path(section: str, key: str) -> None:
    message = config_error(with_secret(section, key, {"env": "X402SRV_NOT_SET"}))
    assert f"{section}.{key}: environment variable X402SRV_NOT_SET is not set" in message


@pytest.mark.parametrize(("section", "key"), SECRET_SLOTS)
def test_missing_secret_file_names_the_key_path(section: str, key: str, tmp_path: Path) -> None:
    document = with_secret(section, key, {"file": "absent.txt"})
    with pytest.raises(ConfigError) as caught:
        parse_config(document, base_dir=tmp_path, env={})
    message = str(caught.value)
    assert f"{section}.{key}: cannot read secret file" in message
    assert str(tmp_path / "absent.txt") in message


def test_an_empty_env_var_is_refused_and_called_empty() -> None:
    """Refused as before, and said as it is (issue 30): "not set" sent sellers looking for a
    missing export when the variable was there, empty."""
    document = config_dict(credentials={"secret": {"env": "EMPTY"}})
    assert "credentials.secret: environment variable EMPTY is set but empty" in config_error(
        document, env={"EMPTY": ""}
    )


def test_empty_secret_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text(" \n")
    document = config_dict(credentials={"secret": {"file": "empty"}})
    with pytest.raises(ConfigError, match=r"credentials\.secret: secret file .* is empty"):
        parse_config(document, base_dir=tmp_path, env={})


@pytest.mark.parametrize(
    "value",
    [
        "",
        42,
        {},
        {"env": 1},
        {"file": ["a"]},
        {"path": "x"},
        {"env": "A", "file": "b"},
        ["x"],
    ],
)
def test_malformed_secret_reference_is_refused(value: Any) -> None:
    message = config_error(config_dict(credentials={"secret": value}), env={"A": ENV_SECRET})
    assert "credentials.secret: " in message
    assert ENV_SECRET not in message


# ----------------------------------------------------- never shown anywhere


@pytest.fixture
def loaded(tmp_path: Path) -> Config:
    """Secrets in every slot the facilitator and HS256 read, and from every source."""
    (tmp_path / "jwt.secret").write_text(FILE_SECRET)
    document = custom_network_dict()
    del document["network"]["rpc_url"]  # settlement.rpc_url is the one read (and shown)
    document["store"] = {
        "backend": "redis",
        "url": f"redis://:{URL_PASSWORD}@cache:6379/0",
    }
    document["settlement"] = {
        "facilitator_url": f"https://user:{URL_PASSWORD}@fac.example.com/x?key={URL_KEY}",
        "facilitator_auth": {"env": "FAC_TOKEN"},
        "rpc_url": f"https://rpc.example.com/v2/{URL_KEY}?x=1",
    }
    document["credentials"] = {"secret": {"file": "jwt.secret"}}
    return parse_config(document, base_dir=tmp_path, env={"FAC_TOKEN": ENV_SECRET})


@pytest.fixture
def loaded_gas(tmp_path: Path) -> Config:
    """The slots of the other choices: the gas wallet's key and an EdDSA key file."""
    (tmp_path / "ed25519.pem").write_text(FILE_SECRET + "-pem")
    document = custom_network_dict(rpc_url=f"https://rpc.example.com/v2/{URL_KEY}")
    document["settlement"] = {"gas_wallet_private_key": GAS_KEY}
    document["credentials"] = {"algorithm": "EdDSA", "private_key": {"file": "ed25519.pem"}}
    return parse_config(document, base_dir=tmp_path, env={})


SECRET_VALUES = [ENV_SECRET, FILE_SECRET, URL_PASSWORD, URL_KEY, GAS_KEY[2:]]


def assert_no_secret(text: str) -> None:
    for value in SECRET_VALUES:
        assert value not in text


def test_the_fixture_really_holds_the_secrets(loaded: Config, loaded_gas: Config) -> None:
    """The control: the secrets below are really loaded, so their absence means something."""
    assert loaded.settlement.facilitator_auth is not None
    assert loaded.settlement.facilitator_auth.reveal() == ENV_SECRET
    assert loaded.credentials.secret is not None
    assert loaded.credentials.secret.reveal() == FILE_SECRET
    assert loaded.store.url is not None
    assert URL_PASSWORD in loaded.store.url.reveal()
    for config in (loaded, loaded_gas):
        assert config.network_info.rpc_url is not None
        assert URL_KEY in config.network_info.rpc_url
    assert loaded_gas.settlement.gas_wallet_private_key is not None
    assert loaded_gas.settlement.gas_wallet_private_key.reveal() == GAS_KEY
    assert loaded_gas.credentials.private_key is not None
    assert FILE_SECRET in loaded_gas.credentials.private_key.reveal()


def test_repr_and_str_of_config_show_no_secret(loaded: Config, loaded_gas: Config) -> None:
    for config in (loaded, loaded_gas):
        assert_no_secret(repr(config))
        assert_no_secret(str(config))
        assert_no_secret(repr(config.settlement))
        assert_no_secret(repr(config.credentials))
        assert_no_secret(repr(config.store))


def test_model_dump_json_shows_no_secret(loaded: Config, loaded_gas: Config) -> None:
    dumped = loaded.model_dump(mode="json")
    assert dumped["credentials"]["secret"] == "<secret: file jwt.secret>"
    assert dumped["settlement"]["facilitator_auth"] == "<secret: env FAC_TOKEN>"
    other = loaded_gas.model_dump(mode="json")
    assert other["settlement"]["gas_wallet_private_key"] == "<secret: inline>"
    assert other["credentials"]["private_key"] == "<secret: file ed25519.pem>"
    for config in (loaded, loaded_gas):
        assert_no_secret(json.dumps(config.model_dump(mode="json")))
        assert_no_secret(config.model_dump_json())


def test_describe_shows_no_secret_and_redacts_the_rpc_url(
    loaded: Config, loaded_gas: Config
) -> None:
    for config in (loaded, loaded_gas):
        described = config.describe()
        assert_no_secret(json.dumps(described))
        assert described["resolved"]["network"]["rpc_url"] == "https://rpc.example.com/<redacted>"


def test_config_error_does_not_echo_secret_values() -> None:
    document = config_dict(
        settlement={"gas_wallet_private_key": GAS_KEY, "facilitator_auth": {"env": "T"}},
        credentials={"secret": ENV_SECRET, "algorithm": "RS256"},
    )
    document["server"] = {"port": "not-a-port"}
    message = config_error(document, env={"T": ENV_SECRET})
    assert "credentials.algorithm" in message
    assert_no_secret(message)


# ------------------------------------------------------------ plugin tables


def test_describe_redacts_secret_looking_plugin_options() -> None:
    config = make_config(
        store={
            "backend": "redis",
            "redis": {
                "url": f"redis://:{URL_PASSWORD}@cache:6379/0",
                "password": URL_PASSWORD,
                "api_key": {"env": "REDIS_KEY"},
                "tls_cert": {"file": "cert.pem"},
                "db": 3,
                "nested": {"auth_token": URL_KEY, "timeout": 2},
            },
        }
    )
    shown = config.describe()["store"]["redis"]
    assert shown == {
        "url": "redis://cache:6379/<redacted>",
        "password": "<redacted>",
        "api_key": "<secret: env REDIS_KEY>",
        "tls_cert": "<secret: file cert.pem>",
        "db": 3,
        "nested": {"auth_token": "<redacted>", "timeout": 2},
    }


def test_describe_redacts_credentialed_urls_under_any_plugin_key() -> None:
    config = make_config(
        store={
            "backend": "redis",
            "redis": {
                "dsn": f"redis://:{URL_PASSWORD}@cache:6379/0",
                "urls": [f"redis://:{URL_PASSWORD}@replica:6379/0"],
            },
        }
    )
    assert URL_PASSWORD not in json.dumps(config.describe())


def test_repr_and_model_dump_hide_inline_plugin_secrets() -> None:
    config = make_config(
        store={"backend": "redis", "redis": {"url": f"redis://:{URL_PASSWORD}@cache:6379/0"}}
    )
    assert URL_PASSWORD not in repr(config)
    assert URL_PASSWORD not in json.dumps(config.model_dump(mode="json"))


# ---------------------------------------------------------------- redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://mainnet.base.org", "https://mainnet.base.org"),
        ("https://sepolia.base.org/", "https://sepolia.base.org"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        (f"https://base.g.alchemy.com/v2/{URL_KEY}", "https://base.g.alchemy.com/<redacted>"),
        (f"https://rpc.example.com?apikey={URL_KEY}", "https://rpc.example.com/<redacted>"),
        (f"https://user:{URL_PASSWORD}@h.example:8443", "https://h.example:8443/<redacted>"),
        (f"https://{URL_KEY}@h.example", "https://h.example/<redacted>"),
        (f"redis://:{URL_PASSWORD}@localhost:6379/0", "redis://localhost:6379/<redacted>"),
        ("https://x402.org/facilitator", "https://x402.org/<redacted>"),
    ],
)
def test_redact_url_keeps_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert URL_KEY not in redact_url(url)
    assert URL_PASSWORD not in redact_url(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://x402.org/facilitator", "https://x402.org/facilitator"),
        (
            "https://api.cdp.coinbase.com/platform/v2/x402",
            "https://api.cdp.coinbase.com/platform/v2/x402",
        ),
        (f"https://fac.example.com/{URL_KEY}", "https://fac.example.com/<redacted>"),
        (
            f"https://fac.example.com/v2/{URL_KEY}/settle",
            "https://fac.example.com/v2/<redacted>/settle",
        ),
        (f"https://fac.example.com/x?key={URL_KEY}", "https://fac.example.com/x?<redacted>"),
        (f"https://user:{URL_PASSWORD}@fac.example.com/f", "https://<redacted>@fac.example.com/f"),
        (f"https://fac.example.com:{URL_KEY}/f", "https://fac.example.com/<redacted>"),
    ],
)
def test_a_facilitator_is_logged_with_its_path_and_without_credentials(
    url: str, shown: str
) -> None:
    """Issue 30: ``https://x402.org/<redacted>`` hid a path that is no secret; keys stay hidden."""
    assert shown_url(url) == shown
    assert URL_KEY not in shown_url(url)
    assert URL_PASSWORD not in shown_url(url)


def test_redact_url_never_raises_on_a_malformed_port() -> None:
    shown = redact_url(f"https://rpc.example.com:{URL_KEY}/v2")
    assert URL_KEY not in shown


def test_redact_url_keeps_ipv6_brackets() -> None:
    assert redact_url("http://[::1]:8545/key") == "http://[::1]:8545/<redacted>"


@pytest.mark.parametrize("key", ["facilitator_url", "rpc_url"])
@pytest.mark.parametrize("url", [f"https://h.example.com:{URL_KEY}/v1", "not a url"])
def test_malformed_url_secret_is_a_config_error_naming_the_key(key: str, url: str) -> None:
    from x402srv.server.registry import Registry

    with pytest.raises(ConfigError) as caught:
        Registry(entry_points=False).build(make_config(settlement={key: url}))
    assert f"settlement.{key}" in str(caught.value)
    assert URL_KEY not in str(caught.value)


def test_undecodable_secret_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "binary").write_bytes(b"\xff\xfe" + FILE_SECRET.encode())
    document = config_dict(credentials={"secret": {"file": "binary"}})
    with pytest.raises(ConfigError, match=r"credentials\.secret: ") as caught:
        parse_config(document, base_dir=tmp_path, env={})
    assert FILE_SECRET not in str(caught.value)


def test_describe_lists_every_network_with_its_tokens_and_no_secret() -> None:
    """Regression: ``x402srv check`` printed each settler's URL and auth as given. Settler
    URLs carry API keys (in the path, the query, the user info) and the auth is a bearer
    token: both appear only redacted, while every network, token and settler is listed."""
    document = config_dict()
    del document["seller"]["network"]
    document["networks"] = [
        {
            "network": "base",
            "rpc_url": f"https://base.example.com/v2/{URL_KEY}",
            "settlers": [
                {
                    "facilitator_url": f"https://user:{URL_PASSWORD}@cdp.example.com/x?key={URL_KEY}",
                    "facilitator_auth": {"env": "FAC_TOKEN"},
                },
                {
                    "facilitator_url": f"https://fac.example.com/{URL_KEY}",
                    "facilitator_auth": ENV_SECRET,
                },
                {"strategy": "gas-wallet", "gas_wallet_private_key": GAS_KEY},
            ],
        },
        {
            "network": "eip155:31337",
            "rpc_url": "http://127.0.0.1:8545",
            "tokens": [
                {"asset": CUSTOM_ASSET, "name": "USD Coin", "version": "2", "decimals": 6},
                {"asset": "0x" + "ab" * 20, "name": "Dollar18", "version": "1", "decimals": 18},
            ],
        },
    ]
    document["settlement"] = {"facilitator_url": f"https://fallback.example.com/{URL_KEY}"}
    config = parse_config(document, env={"FAC_TOKEN": ENV_SECRET})

    described = config.describe()
    text = json.dumps(described)

    assert_no_secret(text)
    assert_no_secret(repr(config))
    base, local = described["resolved"]["networks"]
    assert (base["caip2"], local["caip2"]) == ("eip155:8453", "eip155:31337")
    assert base["rpc_url"] == "https://base.example.com/<redacted>"
    assert [t["asset"] for t in base["tokens"]] == ["0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"]
    assert [(t["decimals"], t["eip712"]["name"]) for t in local["tokens"]] == [
        (6, "USD Coin"),
        (18, "Dollar18"),
    ]
    assert base["settlers"] == [
        {
            "settler": "facilitator https://<redacted>@cdp.example.com/x?<redacted> "
            "#1 on eip155:8453",
            "strategy": "facilitator",
            "from": "networks[0].settlers[0]",
            "facilitator_auth": "<secret: env FAC_TOKEN>",
        },
        {
            "settler": "facilitator https://fac.example.com/<redacted> #2 on eip155:8453",
            "strategy": "facilitator",
            "from": "networks[0].settlers[1]",
            "facilitator_auth": "<secret: inline>",
        },
        {
            "settler": "gas-wallet #3 on eip155:8453",
            "strategy": "gas-wallet",
            "from": "networks[0].settlers[2]",
            "gas_wallet_private_key": "<secret: inline>",
        },
    ]
    assert local["settlers"][0]["settler"] == (
        "facilitator https://fallback.example.com/<redacted> #1 on eip155:31337"
    )
    assert described["networks"][0]["settlers"][0]["facilitator_url"] == "<secret: inline>"
