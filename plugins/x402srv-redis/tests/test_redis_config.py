"""Building the store from the TOML: the entry point, options, URL and TTL checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from x402srv_redis import RedisOptions, RedisStore, build_redis_store

from x402srv.config.models import Config, parse_config
from x402srv.errors import ConfigError
from x402srv.server.plugin_context import PluginContext
from x402srv.server.registry import Registry

PASSWORD = "s3cret-Redis-pass"  # grepped for in every output


def _config(tmp_path: Path, store: dict[str, Any], **sections: Any) -> Config:
    return parse_config(
        {
            "seller": {
                "agent_name": "Weather Oracle",
                "agent_description": "Paid hourly weather data",
                "agent_url": "https://api.example.com",
                "provider_name": "Example Inc",
                "provider_url": "https://example.com",
                "wallet_address": "0x" + "11" * 20,
                "network": "base-sepolia",
            },
            "plans": [
                {"plan_id": "hourly", "unit_amount": "$0.10", "description": "An hour"},
                {
                    "plan_id": "weekly",
                    "unit_amount": "$5",
                    "description": "A week",
                    "token_ttl_seconds": 7 * 86_400,
                },
            ],
            "credentials": {"secret": "s" * 32},
            "store": store,
            **sections,
        },
        base_dir=tmp_path,
        env={"X402SRV_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:6390/2"},
    )


def _build(config: Config) -> RedisStore:
    ctx = PluginContext(
        config=config,
        name="redis",
        key_path="store.redis",
        options=config.store.plugin_options("redis"),
    )
    return build_redis_store(ctx)


def test_the_entry_point_registers_redis(tmp_path: Path) -> None:
    config = _config(tmp_path, {"backend": "redis", "url": {"env": "X402SRV_REDIS_URL"}})
    store = Registry()._context("store", "store.backend", "redis", config)
    assert isinstance(store, RedisStore)
    assert store.options == RedisOptions()
    assert store.keys.prefix == "x402srv:"
    assert PASSWORD not in repr(store)
    assert repr(store) == "RedisStore(redis://127.0.0.1:6390/<redacted>, prefix='x402srv:')"


def test_several_workers_are_fine(tmp_path: Path) -> None:
    config = _config(
        tmp_path, {"backend": "redis", "url": "redis://127.0.0.1:6390"}, server={"workers": 4}
    )
    assert isinstance(_build(config), RedisStore)


def test_options_are_validated_with_their_key_path(tmp_path: Path) -> None:
    options: dict[str, Any] = {
        "key_prefix": "shop-a:",
        "max_connections": 8,
        "pool_timeout_seconds": 0.5,
        "socket_timeout_seconds": 1,
        "connect_timeout_seconds": 1,
        "record_ttl_seconds": 40 * 86_400,
    }
    store = _build(_config(tmp_path, {"backend": "redis", "url": "redis://h", "redis": options}))
    assert store.options == RedisOptions(**options)
    for bad, key in [
        ({"keyprefix": "x"}, r"store\.redis\.keyprefix: unknown key"),
        ({"key_prefix": ""}, r"store\.redis\.key_prefix"),
        ({"key_prefix": "a b:"}, r"store\.redis\.key_prefix"),
        ({"max_connections": 0}, r"store\.redis\.max_connections"),
        ({"socket_timeout_seconds": 0}, r"store\.redis\.socket_timeout_seconds"),
    ]:
        with pytest.raises(ConfigError, match=key):
            _build(_config(tmp_path, {"backend": "redis", "url": "redis://h", "redis": bad}))


def test_a_url_is_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _build(_config(tmp_path, {"backend": "redis"}))
    assert caught.value.path == "store.url"


def test_urls_of_other_schemes_are_refused_without_echoing_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, {"backend": "redis", "url": f"http://:{PASSWORD}@example.com"})
    assert PASSWORD not in str(caught.value)
    assert "store.url" in str(caught.value)


def test_record_ttl_must_outlive_grants_and_payments(tmp_path: Path) -> None:
    """7-day tokens + 300 s validBefore window + 900 s challenge: a week is not enough."""
    week = 7 * 86_400
    with pytest.raises(ConfigError, match=f"at least {week + 300 + 900} s") as caught:
        _build(
            _config(
                tmp_path,
                {"backend": "redis", "url": "redis://h", "redis": {"record_ttl_seconds": week}},
            )
        )
    assert caught.value.path == "store.redis.record_ttl_seconds"
    enough = {"record_ttl_seconds": week + 1200}
    assert _build(_config(tmp_path, {"backend": "redis", "url": "redis://h", "redis": enough}))


def test_tls_ca_file_is_relative_to_the_config_and_needs_rediss(tmp_path: Path) -> None:
    tls = {"tls_ca_file": "certs/ca.pem"}
    store = _build(_config(tmp_path, {"backend": "redis", "url": "rediss://h", "redis": tls}))
    assert store.options.tls_ca_file == tmp_path / "certs" / "ca.pem"
    with pytest.raises(ConfigError, match=r"store\.redis\.tls_ca_file"):
        _build(_config(tmp_path, {"backend": "redis", "url": "redis://h", "redis": tls}))


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"max_connections": "32"},
            'store.redis.max_connections: expected an integer, got a string "32"',
        ),
        (
            {"max_connections": True},
            "store.redis.max_connections: expected an integer, got a boolean",
        ),
        (
            {"record_ttl_seconds": 86400.0 * 40},
            "store.redis.record_ttl_seconds: expected an integer",
        ),
        (
            {"require_durable": "yes"},
            'store.redis.require_durable: expected true or false, got a string "yes"',
        ),
        ({"socket_timeout_seconds": "2"}, "store.redis.socket_timeout_seconds: expected a number"),
        ({"key_prefix": 7}, "store.redis.key_prefix: expected a string, got an integer 7"),
        (
            {"wait_timeout_seconds": 0.5},
            "store.redis.wait_timeout_seconds: ignored, because wait_replicas is 0",
        ),
    ],
)
def test_options_are_strict_and_none_is_ignored(
    tmp_path: Path, options: dict[str, Any], expected: str
) -> None:
    """Docs/configuration.md: no value is converted, and a key with no effect is an error."""
    store = {"backend": "redis", "url": "redis://h", "redis": options}
    with pytest.raises(ConfigError) as caught:
        _build(_config(tmp_path, store))
    assert expected in str(caught.value)


def test_wait_timeout_is_accepted_with_replicas(tmp_path: Path) -> None:
    options = {"wait_replicas": 1, "wait_timeout_seconds": 0.5}
    store = _build(_config(tmp_path, {"backend": "redis", "url": "redis://h", "redis": options}))
    assert store.options.wait_timeout_seconds == 0.5
