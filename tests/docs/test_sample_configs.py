"""Every TOML sample the docs include is a config x402srv accepts, as ``x402srv check`` does.

``docs/samples/seller.toml`` is the quickstart's whole config; the other samples
show a few tables each, so each is laid over it (its top-level tables replace the
quickstart's) and the result must load and build every plugin it selects.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support.paths import SAMPLES
from x402srv.config.models import Config, load_config
from x402srv.server.registry import Registry
from x402srv.testing import toml

QUICKSTART = SAMPLES / "seller.toml"
FRAGMENTS = sorted(path for path in SAMPLES.glob("*.toml") if path != QUICKSTART)

#: What the samples' { env = "..." } references hold in these tests (shaped like the real ones).
ENV = {
    "X402SRV_JWT_SECRET": "docs-sample-secret-" + "x" * 32,
    "X402SRV_FACILITATOR_TOKEN": "facilitator-token",
    "X402SRV_UPSTREAM_SECRET": "upstream-secret-" + "y" * 16,
    "X402SRV_REDIS_URL": "redis://:password@127.0.0.1:6379/0",
    "X402SRV_POSTGRES_DSN": "postgresql://x402srv:password@127.0.0.1:5432/x402srv",
    "X402SRV_GAS_WALLET_KEY": "0x" + "11" * 32,
    "X402SRV_REFUND_WALLET_KEY": "0x" + "22" * 32,
    "X402SRV_RPC_URL": "https://sepolia.base.org",
    "X402SRV_ADMIN_TOKEN": "docs-admin-token-" + "a" * 24,
    "X402SRV_OFFER_RECEIPT_KEY": "0x" + "22" * 32,
}


def checked(document: dict[str, Any], directory: Path) -> Config:
    """Write, load and build it the way ``x402srv check --config`` does."""
    path = directory / "seller.toml"
    path.write_text(toml.dumps(document))
    config = load_config(path, env=ENV)
    Registry().build(config)  # every selected plugin's factory: options, keys, paths
    return config


def test_the_quickstart_config_is_complete(tmp_path: Path) -> None:
    config = checked(tomllib.loads(QUICKSTART.read_text()), tmp_path)
    assert [plan.plan_id for plan in config.plans] == ["hourly"]
    assert config.credentials.secret is not None
    assert config.credentials.secret.reveal() == ENV["X402SRV_JWT_SECRET"]


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda path: path.name)
def test_each_sample_loads_over_the_quickstart(fragment: Path, tmp_path: Path) -> None:
    shown = tomllib.loads(fragment.read_text())
    document = {**tomllib.loads(QUICKSTART.read_text()), **shown}
    for name in ("ed25519-2026-12.pem", "ed25519-2026-11.pem"):  # rotation.toml's key files
        key = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        (tmp_path / "secrets").mkdir(exist_ok=True)
        (tmp_path / "secrets" / name).write_bytes(key)
    (tmp_path / "schemas").mkdir()  # bazaar.toml's output schema file
    schema = {"properties": {"temperature": {"type": "number"}}, "required": ["temperature"]}
    (tmp_path / "schemas" / "forecast-out.json").write_text(json.dumps(schema))
    described = checked(document, tmp_path).describe()
    for table in shown:  # what the sample shows is what the server runs with
        assert table in described, table
