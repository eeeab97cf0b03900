"""Typos in the TOML, answered the way a seller can fix them (issue 30, item 6).

An unknown key gets the closest key its table takes; an environment variable
set to nothing is not "not set"; the command line puts ``seller.toml:LINE:``
before each key path it can place (``x402srv.config.lines``, best effort).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.configs import config_dict, make_config
from x402srv.cli.main import main
from x402srv.config.lines import key_lines, line_of
from x402srv.config.models import parse_config
from x402srv.errors import ConfigError

SELLER = textwrap.dedent(
    """\
    # a seller's config, with its mistakes
    [seller]
    agent_name = "Weather Oracle"
    agent_description = "Paid hourly weather data"
    agent_url = "https://api.example.com"
    provider_name = "Example Inc"
    provider_url = "https://example.com"
    wallet_address = "0x209693bc6afc0c5328ba36faf03c514ef312287c"
    network = "base-sepolia"

    [[plans]]
    plan_id = "hourly"
    unit_amount = "$0.10"
    description = "One hour"

    [[plans]]
    plan_id = "calls"
    unit_amout = "$1.00"
    description = \"\"\"
    A thousand calls
    calls = 1000
    \"\"\"

    [server]
    prot = 8402

    [credentials]
    secret = { env = "X402SRV_TYPO_SECRET" }
    """
)


def _error(document: dict[str, object], env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, env=env or {})
    return str(caught.value)


@pytest.mark.parametrize(
    ("table", "key", "hint"),
    [
        ("plans", "unit_amout", "unit_amount"),
        ("server", "prot", "port"),
        ("seller", "agent_nmae", "agent_name"),
        ("server", "zzz", None),
    ],
)
def test_an_unknown_key_gets_the_closest_key_of_its_table(
    table: str, key: str, hint: str | None
) -> None:
    document = config_dict()
    if table == "plans":
        document["plans"][0][key] = "$0.10"
        path = f"plans[0].{key}"
    else:
        document.setdefault(table, {})[key] = 1
        path = f"{table}.{key}"
    message = _error(document)
    expected = f"{path}: unknown key" + (f" (did you mean `{hint}`?)" if hint else "")
    assert message == f"invalid configuration: {expected}"


def test_an_unknown_key_of_a_plugin_table_gets_the_closest_too() -> None:
    from x402srv.server.registry import Registry

    config = make_config(store={"backend": "sqlite", "sqlite": {"synchronus": "FULL"}})
    with pytest.raises(ConfigError, match=r"sqlite\.synchronus: unknown key \(did you mean `synch"):
        Registry(entry_points=False).build(config)


def test_an_empty_environment_variable_is_not_called_unset() -> None:
    document = config_dict(credentials={"secret": {"env": "X402SRV_TYPO_SECRET"}})
    assert _error(document, {"X402SRV_TYPO_SECRET": ""}).endswith(
        "credentials.secret: environment variable X402SRV_TYPO_SECRET is set but empty"
    )
    assert _error(document, {}).endswith(
        "credentials.secret: environment variable X402SRV_TYPO_SECRET is not set"
    )


def test_key_lines_follow_arrays_of_tables_and_skip_multiline_values() -> None:
    lines = key_lines(SELLER)
    numbered = SELLER.splitlines()
    assert numbered[lines["plans[1].unit_amout"] - 1] == 'unit_amout = "$1.00"'
    assert numbered[lines["plans[0]"] - 1] == "[[plans]]"
    assert numbered[lines["server.prot"] - 1] == "prot = 8402"
    assert "plans[1].calls" not in lines  # inside the description's multi-line string
    assert line_of("plans[1].calls", lines) == lines["plans[1]"]  # its table, at least
    assert line_of("credentials.secret.env", lines) == lines["credentials.secret"]
    nested = key_lines("[[networks]]\n[[networks.settlers]]\n[[networks]]\n[[networks.settlers]]\n")
    assert nested == {
        "networks[0]": 1,
        "networks[0].settlers[0]": 2,
        "networks[1]": 3,
        "networks[1].settlers[0]": 4,
    }


def test_the_command_line_names_the_line_of_each_mistake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("X402SRV_TYPO_SECRET", "")
    Path("seller.toml").write_text(SELLER)
    assert main(["check", "--config", "seller.toml"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "x402srv: configuration error:",
        "  seller.toml:16: plans[1].unit_amount: required key is missing",  # its [[plans]]
        "  seller.toml:18: plans[1].unit_amout: unknown key (did you mean `unit_amount`?)",
        "  seller.toml:25: server.prot: unknown key (did you mean `port`?)",
        "  seller.toml:28: credentials.secret: environment variable X402SRV_TYPO_SECRET is set "
        "but empty",
    ]


def test_a_plugin_error_names_its_line_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    fixed = SELLER.replace("unit_amout", "unit_amount").replace("prot", "port")
    fixed = fixed.replace('{ env = "X402SRV_TYPO_SECRET" }', '"' + "s" * 40 + '"')
    Path("seller.toml").write_text(fixed + '\n[store]\nbackend = "sqlit"\n')
    assert main(["check", "--config", "seller.toml"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "x402srv: configuration error: seller.toml:31: store.backend: no store plugin named 'sqlit'"
    )
