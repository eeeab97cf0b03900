"""``Registry``: built-ins registered like any plugin, chosen by name, never by hook order.

Building does no I/O (nothing is opened), so the real default plugins are
built here without a chain, a facilitator or a database.
"""

from __future__ import annotations

import re
import types
from typing import Any

import pytest
from pydantic import BaseModel

from tests.support.configs import config_dict, make_config
from x402srv import hookimpl
from x402srv.config.models import Config, parse_config
from x402srv.default_plugins.facilitator import FacilitatorSettler
from x402srv.default_plugins.jwt_issuer import JwtIssuer
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.errors import ConfigError, PluginNotFound
from x402srv.plugin import DelegatingStore, PluginContext, SecretValue
from x402srv.server.registry import LOAD_PLUGINS_ENV, Registry


@pytest.fixture(scope="module")
def registry() -> Registry:
    """Built-ins only: what the core ships, whatever else is installed."""
    return Registry(entry_points=False)


class AcmeStore(DelegatingStore):
    """A third-party store: a wrapper around the memory store, as a real plugin might be."""


def store_plugin(
    module_name: str, store_name: str, built: list[PluginContext], *, returns: Any = None
) -> Any:
    """A third-party plugin, shaped like a real one: a module with a hookimpl."""
    module = types.ModuleType(module_name)
    store = AcmeStore(MemoryStore(), name=store_name)

    def factory(ctx: PluginContext) -> object:
        built.append(ctx)
        return store if returns is None else returns

    @hookimpl
    def register_stores(register: Any) -> None:
        register(store_name, factory)

    vars(module).update(store=store, register_stores=register_stores)
    return module


# ------------------------------------------------------------------- built-ins


def test_builtins_are_registered(registry: Registry) -> None:
    assert registry.names("store") == ["memory", "sqlite"]
    assert registry.names("settler") == ["facilitator"]
    assert registry.names("credential issuer") == ["callback", "jwt"]


def test_describe_lists_each_builtin_with_what_it_registers(registry: Registry) -> None:
    rows = {row["plugin"]: row for row in registry.describe()}
    assert rows["x402srv.default_plugins.memory_store"] == {
        "plugin": "x402srv.default_plugins.memory_store",
        "distribution": "built-in",
        "stores": ["memory"],
    }
    assert rows["x402srv.default_plugins.facilitator"]["settlers"] == ["facilitator"]
    assert rows["x402srv.default_plugins.jwt_issuer"]["credential issuers"] == ["jwt"]


def test_installed_entry_point_plugins_are_added() -> None:
    registry = Registry()
    assert "gas-wallet" in registry.names("settler")
    row = next(r for r in registry.describe() if r["plugin"] == "gas-wallet")
    assert row["distribution"].startswith("x402srv-gaswallet ")


def test_default_config_builds_sqlite_facilitator_and_jwt(registry: Registry) -> None:
    built = registry.build(make_config())
    assert isinstance(built.store, SqliteStore)
    assert isinstance(built.settler, FacilitatorSettler)
    assert isinstance(built.issuer, JwtIssuer)
    assert built.chain is not None  # base-sepolia has a default RPC


def test_memory_store_is_selected_by_name(registry: Registry) -> None:
    built = registry.build(make_config(store={"backend": "memory"}))
    assert isinstance(built.store, MemoryStore)


# ------------------------------------------------------------ unknown names


@pytest.mark.parametrize(
    ("sections", "path", "installed"),
    [
        ({"store": {"backend": "nosuch"}}, "store.backend", "memory, sqlite"),
        ({"settlement": {"strategy": "nosuch"}}, "settlement.strategy", "facilitator"),
        ({"credentials": {"issuer": "nosuch", "secret": "s" * 32}}, "credentials.issuer", "jwt"),
    ],
)
def test_unknown_plugin_name_lists_the_installed_ones(
    registry: Registry, sections: dict[str, Any], path: str, installed: str
) -> None:
    with pytest.raises(PluginNotFound) as caught:
        registry.build(make_config(**sections))
    error = caught.value
    assert error.path == path
    assert str(error).startswith(f"{path}: no ")
    assert "'nosuch' is installed" in str(error)
    assert installed in str(error)


def test_unknown_settler_lists_entry_point_plugins_too() -> None:
    with pytest.raises(PluginNotFound, match=r"installed: facilitator, gas-wallet"):
        Registry().build(make_config(settlement={"strategy": "nosuch"}))


def test_gas_wallet_key_alone_selects_the_gas_wallet_plugin(registry: Registry) -> None:
    """With built-ins only, the implicit gas-wallet choice fails by name, not silently."""
    config = make_config(settlement={"gas_wallet_private_key": "0x" + "11" * 32})
    with pytest.raises(PluginNotFound, match="'gas-wallet'"):
        registry.build(config)


@pytest.mark.parametrize(
    ("sections", "path"),
    [
        ({"store": {"backend": "sqlite", "redis": {"url": "redis://h"}}}, "store.redis"),
        ({"store": {"backend": "sqlite", "memory": {}}}, "store.memory"),
        ({"settlement": {"nosuch": {"x": 1}}}, "settlement.nosuch"),
        ({"credentials": {"secret": "s" * 32, "vault": {"mount": "kv"}}}, "credentials.vault"),
    ],
)
def test_option_table_of_an_unselected_plugin_is_refused(
    sections: dict[str, Any], path: str
) -> None:
    """Installed or not, a table for a plugin the config does not choose would be ignored."""
    with pytest.raises(ConfigError, match=rf"{re.escape(path)}: ignored, because"):
        make_config(**sections)


def test_option_table_of_an_uninstalled_but_selected_plugin_is_refused(registry: Registry) -> None:
    config = make_config(store={"backend": "redis", "url": "redis://h", "redis": {"db": 1}})
    with pytest.raises(PluginNotFound) as caught:
        registry.build(config)
    assert caught.value.path == "store.backend"
    assert "installed: " in str(caught.value)


def test_builtin_plugin_options_are_validated_with_their_path(registry: Registry) -> None:
    with pytest.raises(ConfigError, match=r"store\.sqlite\.nosuch: unknown key"):
        registry.build(make_config(store={"backend": "sqlite", "sqlite": {"nosuch": 1}}))


# -------------------------------------------------------- third-party plugins


def test_third_party_store_is_selectable_by_name() -> None:
    built: list[PluginContext] = []
    plugin = store_plugin("acme_store", "acme", built)
    registry = Registry(entry_points=False, extra_plugins=[plugin])
    assert registry.names("store") == ["acme", "memory", "sqlite"]
    config: Config = make_config(store={"backend": "acme", "acme": {"region": "eu"}})
    result = registry.build(config)
    assert result.store is plugin.store
    [ctx] = built
    assert (ctx.name, ctx.key_path) == ("acme", "store.acme")
    assert dict(ctx.options) == {"region": "eu"}
    assert ctx.config is config
    row = next(r for r in registry.describe() if r["plugin"] == "acme_store")
    assert row["stores"] == ["acme"]


def test_unselected_third_party_factory_is_never_called() -> None:
    built: list[PluginContext] = []
    registry = Registry(entry_points=False, extra_plugins=[store_plugin("acme", "acme", built)])
    registry.build(make_config())
    assert built == []


def test_two_plugins_registering_the_same_name_is_an_error_naming_both() -> None:
    first = store_plugin("acme_one", "shared", [])
    second = store_plugin("acme_two", "shared", [])
    with pytest.raises(ConfigError) as caught:
        Registry(entry_points=False, extra_plugins=[first, second])
    message = str(caught.value)
    assert "'shared' is registered by both" in message
    assert "acme_one" in message
    assert "acme_two" in message


def test_a_plugin_cannot_take_over_a_builtin_name() -> None:
    with pytest.raises(ConfigError) as caught:
        Registry(entry_points=False, extra_plugins=[store_plugin("evil", "sqlite", [])])
    message = str(caught.value)
    assert "'sqlite' is registered by both" in message
    assert "x402srv.default_plugins.sqlite.store" in message
    assert "evil" in message


# -------------------------------------------------------- what a factory returns


def test_a_factory_that_returns_no_store_is_a_config_error_naming_the_plugin() -> None:
    """A module registered as a store (or anything without the Protocol's methods) is refused."""
    module = types.ModuleType("not_a_store")
    plugin = store_plugin("acme_store", "acme", [], returns=module)
    registry = Registry(entry_points=False, extra_plugins=[plugin])
    with pytest.raises(ConfigError) as caught:
        registry.build(make_config(store={"backend": "acme"}))
    message = str(caught.value)
    assert message.startswith("store.backend: the store 'acme' of plugin acme_store")
    assert "is not a Store" in message
    assert "no 'transition'" in message


def test_a_store_whose_methods_are_not_async_is_refused() -> None:
    class Blocking(AcmeStore):
        def transition(self, request: Any) -> Any:
            return None

    plugin = store_plugin("acme_store", "acme", [], returns=Blocking(MemoryStore()))
    registry = Registry(entry_points=False, extra_plugins=[plugin])
    with pytest.raises(ConfigError, match="'transition' is not async"):
        registry.build(make_config(store={"backend": "acme"}))


# -------------------------------------------------------- broken and unwanted plugins


class BrokenEntryPoint:
    """An entry point whose module raises on import (a broken third-party distribution)."""

    name = "broken"
    group = "x402srv"

    class dist:
        name = "x402srv-broken"
        version = "0.0.1"

    def load(self) -> Any:
        raise ImportError("No module named 'something_it_needs'")


class GoodEntryPoint:
    name = "acme"
    group = "x402srv"

    class dist:
        name = "x402srv-acme"
        version = "1.0"

    def load(self) -> Any:
        return store_plugin("acme_module", "acme", [])


def installed(monkeypatch: pytest.MonkeyPatch, *entry_points: Any) -> None:
    # (the real entry points are those of this checkout; a broken distribution cannot be
    # installed into the shared test environment, so its entry point is given here)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group=None: list(entry_points))


def test_a_broken_plugin_the_config_does_not_use_is_only_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    installed(monkeypatch, BrokenEntryPoint(), GoodEntryPoint())
    registry = Registry()
    assert "acme" in registry.names("store")
    assert registry.build(make_config(store={"backend": "acme"})).store.name == "acme"
    assert "broken" in registry.broken
    assert "plugin 'broken' failed to load" in caplog.text


def test_selecting_a_name_while_a_plugin_is_broken_names_the_broken_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed(monkeypatch, BrokenEntryPoint())
    with pytest.raises(PluginNotFound) as caught:
        Registry().build(make_config(store={"backend": "acme"}))
    assert "'broken' did not load (distribution x402srv-broken: ImportError" in str(caught.value)


def test_the_allow_list_loads_only_the_plugins_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, BrokenEntryPoint(), GoodEntryPoint())
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "acme")
    registry = Registry()
    assert registry.broken == {}
    assert "acme" in registry.names("store")
    monkeypatch.setenv(LOAD_PLUGINS_ENV, "")
    assert Registry().names("store") == ["memory", "sqlite"]


# ------------------------------------------------------- stores built by stores


def test_a_store_builds_the_store_it_wraps_by_name() -> None:
    """``PluginContext.build_store``: a wrapper gets a registered store, built like any."""

    def factory(ctx: PluginContext) -> object:
        return AcmeStore(ctx.build_store("memory"), name="acme")

    @hookimpl
    def register_stores(register: Any) -> None:
        register("acme", factory)

    module = types.ModuleType("acme_wrapper")
    vars(module).update(register_stores=register_stores)
    registry = Registry(entry_points=False, extra_plugins=[module])
    store = registry.build_store(make_config(store={"backend": "acme"}))
    assert isinstance(store, AcmeStore)
    assert isinstance(store.inner, MemoryStore)


def test_a_plugin_option_typed_secret_value_reads_the_config_environment() -> None:
    """``{ env = ... }`` in a plugin's table comes from the env the config was loaded with."""

    class Options(BaseModel):
        token: SecretValue

    config = parse_config(config_dict(store={"backend": "memory"}), env={"ACME_TOKEN": "s3cret"})
    ctx = PluginContext(
        config=config, name="acme", key_path="store.acme", options={"token": {"env": "ACME_TOKEN"}}
    )
    token = ctx.parse_options(Options).token
    assert token.reveal() == "s3cret"
    assert "s3cret" not in repr(token)
    with pytest.raises(ConfigError, match=r"store\.acme\.token: .*MISSING is not set"):
        PluginContext(
            config=config, name="acme", key_path="store.acme", options={"token": {"env": "MISSING"}}
        ).parse_options(Options)
