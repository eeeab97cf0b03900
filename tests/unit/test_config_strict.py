"""Config is strict (docs/configuration.md): no value is converted, no key is ignored.

Issue 23 found ``calls = "50"`` read as 50, ``refund_on_5xx = "no"`` read as
false (pydantic's lax mode turns "no" into False), and ``cost = 1`` on a route
whose plans sell no calls passing ``check``. Each is a named test here, once in
process and once through the real ``x402srv check`` (exit 2, one line naming
the key); the tables below hold the other types and the other idle keys.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import check
from tests.support.configs import config_dict
from x402srv.config.models import parse_config
from x402srv.default_plugins.facilitator import FacilitatorOptions
from x402srv.default_plugins.sqlite.store import SqliteOptions
from x402srv.errors import ConfigError
from x402srv.server.plugin_context import PluginContext

Document = dict[str, Any]

CALLS_50 = {
    "plan_id": "calls-50",
    "unit_amount": "$0.50",
    "description": "50 calls",
    "calls": 50,
}
ROUTE = {"prefix": "/api", "upstream": "http://127.0.0.1:9000"}


def error_of(document: Document) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, env={})
    return str(caught.value)


def with_calls(**plan: Any) -> Document:
    document = config_dict()
    document["plans"].append({**CALLS_50, **plan})
    return document


def with_route(plans: list[str] | None = None, **route: Any) -> Document:
    document = with_calls()
    document["routes"] = [{**ROUTE, **({"plans": plans} if plans else {}), **route}]
    return document


# ------------------------------------------------------- the three examples

CALLS_AS_A_STRING = with_calls(calls="50")
REFUND_AS_A_STRING = with_route(refund_on_5xx="no")
COST_WITHOUT_CALLS = with_route(plans=["hourly"], cost=1)

CALLS_MESSAGE = 'plans[2].calls: expected an integer, got a string "50"'
REFUND_MESSAGE = 'routes[0].refund_on_5xx: expected true or false, got a string "no"'
COST_MESSAGE = "routes[0].cost: ignored, because none of the route's plans sells calls"


def test_calls_as_a_string_is_refused_not_read_as_a_number() -> None:
    assert CALLS_MESSAGE in error_of(CALLS_AS_A_STRING)
    parse_config(with_calls(calls=50), env={})  # the control: the integer is fine


def test_refund_on_5xx_as_a_string_is_refused_not_read_as_false() -> None:
    assert REFUND_MESSAGE in error_of(REFUND_AS_A_STRING)
    assert parse_config(with_route(refund_on_5xx=False), env={}).routes[0].refund_on_5xx is False


def test_cost_on_a_route_whose_plans_sell_no_calls_is_refused_even_at_its_default() -> None:
    assert COST_MESSAGE in error_of(COST_WITHOUT_CALLS)
    parse_config(with_route(plans=["calls-50"], cost=1), env={})  # it takes effect there
    parse_config(with_route(plans=["hourly"]), env={})  # left out: nothing is ignored


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (CALLS_AS_A_STRING, CALLS_MESSAGE),
        (REFUND_AS_A_STRING, REFUND_MESSAGE),
        (COST_WITHOUT_CALLS, COST_MESSAGE),
    ],
    ids=["calls-string", "refund-string", "cost-without-calls"],
)
def test_x402srv_check_refuses_it_with_exit_2_and_one_line(
    tmp_path: Path, document: Document, expected: str
) -> None:
    done = check(tmp_path, document)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert re.match(r"x402srv: configuration error: seller\.toml:\d+: ", line), line
    assert expected in line
    assert done.stdout == ""


# ------------------------------------------------------------------ no coercion

Edit = Callable[[Document], None]


def _set(path: str, value: Any) -> Edit:
    """Set ``a.b[0].c`` in the document."""

    def edit(document: Document) -> None:
        target: Any = document
        *parents, key = path.replace("[", ".").replace("]", "").split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target.setdefault(part, {})
        target[key] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("plans[0].token_ttl_seconds", True, "expected an integer, got a boolean true"),
        ("plans[0].token_ttl_seconds", 3600.0, "expected an integer, got a float 3600.0"),
        ("plans[0].token_ttl_seconds", "3600", 'expected an integer, got a string "3600"'),
        ("server.port", "8402", 'expected an integer, got a string "8402"'),
        ("server.workers", False, "expected an integer, got a boolean false"),
        ("server.readiness_cache_seconds", "2", 'expected a number, got a string "2"'),
        ("server.readiness_cache_seconds", True, "expected a number, got a boolean true"),
        ("server.host", 127, "expected a string, got an integer 127"),
        ("server.cors_origins", "*", 'expected an array, got a string "*"'),
        ("reconciler.enabled", "true", 'expected true or false, got a string "true"'),
        ("reconciler.enabled", 1, "expected true or false, got an integer 1"),
        ("rate_limit.unpaid_requests", 60.5, "expected an integer, got a float 60.5"),
        ("settlement.lease_seconds", "120", 'expected an integer, got a string "120"'),
        ("settlement.circuit_breaker", 3, "expected a table, got an integer 3"),
        ("metrics.enabled", "yes", 'expected true or false, got a string "yes"'),
        ("analytics.flush_seconds", "5", 'expected a number, got a string "5"'),
        ("revocation.publish", 0, "expected true or false, got an integer 0"),
        ("seller.agent_version", 1, "expected a string, got an integer 1"),
    ],
)
def test_a_value_of_another_type_is_refused_not_converted(
    path: str, value: Any, expected: str
) -> None:
    document = config_dict()
    _set(path, value)(document)
    assert f"{path}: {expected}" in error_of(document)


def test_route_keys_are_strict_too() -> None:
    message = error_of(with_route(plans=["calls-50"], cost="2"))
    assert 'routes[0].cost: expected an integer, got a string "2"' in message
    message = error_of(with_route(strip_prefix=1))
    assert "routes[0].strip_prefix: expected true or false, got an integer 1" in message
    message = error_of(with_route(connect_timeout_seconds="5"))
    assert 'routes[0].connect_timeout_seconds: expected a number, got a string "5"' in message


def test_a_float_key_takes_a_whole_number() -> None:
    """TOML writes 30 seconds as ``30``: an integer is a number, not a coercion."""
    document = config_dict(server={"readiness_cache_seconds": 3})
    assert parse_config(document, env={}).server.readiness_cache_seconds == 3


def test_a_secret_value_is_never_echoed_by_a_type_error() -> None:
    document = config_dict(credentials={"secret": 12345678901234567890123456789012})
    message = error_of(document)
    assert "credentials.secret" in message
    assert "1234567890" not in message


@pytest.mark.parametrize(
    ("model", "options", "expected"),
    [
        (SqliteOptions, {"busy_timeout_ms": "5000"}, 'expected an integer, got a string "5000"'),
        (SqliteOptions, {"busy_timeout_ms": True}, "expected an integer, got a boolean true"),
        (FacilitatorOptions, {"verify_before_settle": "no"}, 'got a string "no"'),
        (FacilitatorOptions, {"read_timeout_seconds": "30"}, "expected a number, got a string"),
    ],
)
def test_builtin_plugin_options_are_strict(model: Any, options: Any, expected: str) -> None:
    config = parse_config(config_dict(), env={})
    ctx = PluginContext(config=config, name="x", key_path="store.x", options=options)
    with pytest.raises(ConfigError) as caught:
        ctx.parse_options(model)
    assert expected in str(caught.value)
    assert f"store.x.{next(iter(options))}" in str(caught.value)


# ------------------------------------------------------------ keys with no effect


def _networks(*settlers: dict[str, Any]) -> Document:
    document = config_dict()
    del document["seller"]["network"]
    document["networks"] = [{"network": "base-sepolia", "settlers": list(settlers)}]
    return document


KEY = "0x" + "ab" * 32
IGNORED: list[tuple[str, Document, str]] = [
    (
        "path-with-redis",
        config_dict(store={"backend": "redis", "url": "redis://h", "path": "x.db"}),
        'store.path: ignored, because only the sqlite store reads it (store.backend is "redis")',
    ),
    (
        "path-with-memory",
        config_dict(store={"backend": "memory", "path": "x.db"}),
        "store.path: ignored",
    ),
    (
        "url-with-sqlite",
        config_dict(store={"backend": "sqlite", "url": "redis://h"}),
        "store.url: ignored, because the sqlite store is a file",
    ),
    (
        "url-with-postgres",
        config_dict(store={"backend": "postgres", "url": "redis://h", "postgres": {}}),
        "store.url: ignored, because the postgres store takes its DSN from [store.postgres]",
    ),
    (
        "sqlite-table-with-redis",
        config_dict(
            store={"backend": "redis", "url": "redis://h", "sqlite": {"synchronous": "FULL"}}
        ),
        "store.sqlite: ignored, because it configures the sqlite store and store.backend",
    ),
    (
        "private-key-with-hs256",
        config_dict(credentials={"secret": "s" * 32, "private_key": "pem"}),
        'credentials.private_key: ignored, because algorithm is "HS256"',
    ),
    (
        "secret-with-eddsa",
        config_dict(credentials={"algorithm": "EdDSA", "private_key": "pem", "secret": "s" * 32}),
        'credentials.secret: ignored, because algorithm is "EdDSA"',
    ),
    (
        "callback-with-jwt",
        config_dict(credentials={"secret": "s" * 32, "callback": "pkg.mod:fn"}),
        "credentials.callback: ignored, because only the callback issuer reads it",
    ),
    (
        "kid-with-callback",
        config_dict(credentials={"issuer": "callback", "callback": "pkg.mod:fn", "kid": "k1"}),
        "credentials.kid: ignored, because only the jwt issuer reads it",
    ),
    (
        "jwt-table-with-callback",
        config_dict(credentials={"issuer": "callback", "callback": "pkg.mod:fn", "jwt": {}}),
        "credentials.jwt: ignored",
    ),
    (
        "facilitator-url-with-gas-wallet",
        config_dict(
            settlement={"gas_wallet_private_key": KEY, "facilitator_url": "https://f.example"}
        ),
        "settlement.facilitator_url: ignored, because it is only for the facilitator strategy",
    ),
    (
        "gas-key-with-facilitator",
        config_dict(settlement={"strategy": "facilitator", "gas_wallet_private_key": KEY}),
        "settlement.gas_wallet_private_key: ignored, because no settler uses it",
    ),
    (
        "gas-key-on-a-facilitator-settler",
        _networks({"strategy": "facilitator", "gas_wallet_private_key": KEY}),
        "networks[0].settlers[0].gas_wallet_private_key: ignored",
    ),
    (
        "default-settler-never-used",
        {
            **_networks({"facilitator_url": "https://f.example"}),
            "settlement": {"facilitator_url": "https://g.example"},
        },
        "settlement.facilitator_url: ignored, because every network lists its own settlers",
    ),
    (
        "breaker-without-failover",
        config_dict(settlement={"circuit_breaker": {"failures": 5}}),
        "settlement.circuit_breaker: ignored, because no network has more than one settler",
    ),
    (
        "gas-wallet-table-with-facilitator",
        config_dict(settlement={"gas-wallet": {"nonce_retries": 2}}),
        "settlement.gas-wallet: ignored, because no settler uses strategy 'gas-wallet'",
    ),
    (
        "network-rpc-under-settlement-rpc",
        config_dict(
            network={"rpc_url": "https://a.example"}, settlement={"rpc_url": "https://b.example"}
        ),
        "network.rpc_url: ignored, because settlement.rpc_url replaces it",
    ),
    (
        "refund-without-calls",
        with_route(plans=["hourly"], refund_on_5xx=False),
        "routes[0].refund_on_5xx: ignored, because none of the route's plans sells calls",
    ),
    (
        "secret-header-without-secret",
        with_route(secret_header="X-Key"),
        "routes[0].secret_header: ignored without secret",
    ),
    (
        "admin-jwt-audience-without-jwt-secret",
        config_dict(admin={"token": "t" * 32, "jwt_audience": "https://aud.example"}),
        "admin.jwt_audience: ignored without jwt_secret",
    ),
]


@pytest.mark.parametrize(
    ("document", "expected"), [case[1:] for case in IGNORED], ids=[case[0] for case in IGNORED]
)
def test_a_key_that_would_be_ignored_is_an_error_naming_it(
    document: Document, expected: str
) -> None:
    assert expected in error_of(copy.deepcopy(document))


def test_keys_in_their_context_are_accepted() -> None:
    """The controls: each key refused above takes effect somewhere, and is accepted there."""
    for document in (
        config_dict(store={"backend": "sqlite", "path": "x.db", "sqlite": {"synchronous": "FULL"}}),
        config_dict(store={"backend": "redis", "url": "redis://h", "redis": {"key_prefix": "a:"}}),
        config_dict(credentials={"algorithm": "EdDSA", "private_key": "pem"}),
        config_dict(credentials={"issuer": "callback", "callback": "pkg.mod:fn"}),
        config_dict(settlement={"gas_wallet_private_key": KEY, "gas-wallet": {"nonce_retries": 2}}),
        _networks({"facilitator_url": "https://f.example"}, {"strategy": "gas-wallet"})
        | {"settlement": {"gas_wallet_private_key": KEY, "circuit_breaker": {"failures": 5}}},
        config_dict(network={"rpc_url": "https://a.example"}),
        with_route(plans=["calls-50"], cost=2, refund_on_5xx=False),
        with_route(secret="s" * 16, secret_header="X-Key"),
        config_dict(admin={"jwt_secret": "j" * 32, "jwt_audience": "https://aud.example"}),
        # A table switched off keeps its keys for when it is switched on again.
        config_dict(metrics={"enabled": False, "path": "/m"}),
    ):
        parse_config(document, env={})
