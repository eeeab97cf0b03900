"""Building the store from the TOML: the entry point, the DSN as a secret, options, TLS files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from x402srv_postgres import PostgresStore, build_postgres_store
from x402srv_postgres.testing import make_tls_files

from x402srv.config.models import Config, parse_config
from x402srv.plugin import ConfigError, PluginContext
from x402srv.server.registry import Registry
from x402srv.testing import launcher, toml

PASSWORD = "s3cret-Postgres-pass"  # grepped for in every output
DSN = f"postgresql://seller:{PASSWORD}@db.internal:5432/ledger?application_name=a"
ENV = {"X402SRV_POSTGRES_DSN": DSN}


def _document(store: dict[str, Any]) -> dict[str, Any]:
    return {
        "seller": {
            "agent_name": "Weather Oracle",
            "agent_description": "Paid hourly weather data",
            "agent_url": "https://api.example.com",
            "provider_name": "Example Inc",
            "provider_url": "https://example.com",
            "wallet_address": "0x" + "11" * 20,
            "network": "base-sepolia",
        },
        "plans": [{"plan_id": "hourly", "unit_amount": "$0.10", "description": "An hour"}],
        "credentials": {"secret": "s" * 32},
        "store": store,
    }


def _config(tmp_path: Path, store: dict[str, Any]) -> Config:
    return parse_config(_document(store), base_dir=tmp_path, env=ENV)


def _build(config: Config) -> PostgresStore:
    ctx = PluginContext(
        config=config,
        name="postgres",
        key_path="store.postgres",
        options=config.store.plugin_options("postgres"),
    )
    return build_postgres_store(ctx)


def _store(**options: Any) -> dict[str, Any]:
    return {"backend": "postgres", "postgres": {"dsn": {"env": "X402SRV_POSTGRES_DSN"}, **options}}


def test_the_entry_point_registers_postgres(tmp_path: Path) -> None:
    assert "postgres" in Registry().names("store")
    built = Registry().build(_config(tmp_path, _store()))
    assert isinstance(built.store, PostgresStore)
    assert built.store.schema == "x402srv"
    assert built.store.options.pool_size == 10


def test_the_dsn_is_a_secret_from_env_or_file(tmp_path: Path) -> None:
    (tmp_path / "dsn").write_text(DSN + "\n")
    from_file = _build(_config(tmp_path, _store(dsn={"file": "dsn"})))
    from_env = _build(_config(tmp_path, _store()))
    assert from_file.dsn.reveal() == from_env.dsn.reveal() == DSN
    for store in (from_file, from_env):
        assert PASSWORD not in repr(store)
        assert repr(store) == "PostgresStore(postgresql://db.internal:5432, schema='x402srv')"
    described = json.dumps(_config(tmp_path, _store()).describe())
    assert PASSWORD not in described
    assert "<secret: env X402SRV_POSTGRES_DSN>" in described


@pytest.mark.parametrize(
    ("store", "path", "words"),
    [
        ({"backend": "postgres"}, "store.postgres.dsn", "required by the postgres store"),
        (_store(dsn="redis://127.0.0.1:6379/0"), "store.postgres.dsn", "postgresql://"),
        (_store(dsn="postgresql://"), "store.postgres.dsn", "postgresql://"),
        (_store(dsn={"env": "UNSET_DSN"}), "store.postgres.dsn", "UNSET_DSN is not set"),
        (_store(pool_size=0), "store.postgres.pool_size", "greater than or equal to 1"),
        (_store(statement_timeout_ms=5), "store.postgres.statement_timeout_ms", "100"),
        (_store(schema="Public; DROP"), "store.postgres.schema", "lowercase identifier"),
        (_store(schema="pg_catalog"), "store.postgres.schema", "not pg_"),
        (_store(sslmode="sometimes"), "store.postgres.sslmode", "verify-full"),
        (_store(sslrootcert="missing.pem", sslmode="verify-full"), "sslrootcert", "not a readable"),
        (_store(colour="blue"), "store.postgres.colour", "unknown key"),
        (
            {**_store(), "url": "redis://127.0.0.1:6379/0"},
            "store.url",
            "[store.postgres] dsn",
        ),
    ],
)
def test_config_errors_name_the_key(
    tmp_path: Path, store: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _build(_config(tmp_path, store))
    message = str(caught.value)
    assert path in message
    assert words in message
    assert PASSWORD not in message
    assert "redis://" not in message  # a wrong DSN is not repeated either


def test_tls_options_must_go_together(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls")
    client = {"sslcert": str(tls.client_cert), "sslkey": str(tls.client_key)}
    with pytest.raises(ConfigError, match="sslcert and sslkey go together"):
        _build(_config(tmp_path, _store(sslmode="verify-full", sslcert=str(tls.client_cert))))
    with pytest.raises(ConfigError, match="need sslmode = require, verify-ca or verify-full"):
        _build(_config(tmp_path, _store(sslrootcert=str(tls.ca), **client)))
    built = _build(
        _config(tmp_path, _store(sslmode="verify-full", sslrootcert="tls/ca.crt", **client))
    )
    assert built.options.sslrootcert == tmp_path / "tls" / "ca.crt"
    (tmp_path / "broken.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="TLS files could not be loaded"):
        _build(_config(tmp_path, _store(sslmode="verify-ca", sslrootcert="broken.pem")))


def test_x402srv_check_shows_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "seller.toml"
    path.write_text(toml.dumps(_document(_store(sslmode="require"))))
    check = launcher.run(
        ["check", "--config", str(path)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", **ENV},
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert PASSWORD not in check.stdout + check.stderr
    assert "db.internal" not in check.stdout + check.stderr


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"pool_size": "10"}, 'store.postgres.pool_size: expected an integer, got a string "10"'),
        ({"pool_size": True}, "store.postgres.pool_size: expected an integer, got a boolean"),
        (
            {"statement_timeout_ms": 5000.0},
            "store.postgres.statement_timeout_ms: expected an integer",
        ),
        (
            {"connect_timeout_seconds": "3"},
            "store.postgres.connect_timeout_seconds: expected a number",
        ),
        ({"schema": 1}, "store.postgres.schema: expected a string, got an integer 1"),
        ({"sslrootcert": 5, "sslmode": "verify-full"}, "store.postgres.sslrootcert"),
    ],
)
def test_options_are_strict(tmp_path: Path, options: dict[str, Any], expected: str) -> None:
    """Docs/configuration.md: a value of another type is refused, never converted."""
    with pytest.raises(ConfigError) as caught:
        _build(_config(tmp_path, _store(**options)))
    assert expected in str(caught.value)
    assert PASSWORD not in str(caught.value)
