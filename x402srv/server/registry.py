"""Collects what plugins register and builds what the TOML names.

Built-ins (``default_plugins.DEFAULT_PLUGINS``) are registered exactly like
third-party plugins found through the ``x402srv`` entry-point group. Names are
collected into ``name -> factory`` per kind; a name registered twice is an
error, and selecting an unknown name lists what is installed.

- ``X402SRV_LOAD_PLUGINS`` (comma-separated entry-point names; empty: none)
  limits which third-party plugins are loaded at all, as llm's
  ``LLM_LOAD_PLUGINS`` does. Built-ins are always there.
- A plugin that fails to load is a warning, not an error, as long as the
  config does not select a name it would have registered: one broken
  distribution must not take every command down. Selecting such a name is a
  ``ConfigError`` that names the broken plugin.
- What a factory returns is checked against its kind's Protocol (every
  method present, async where the Protocol's is) before anything starts.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pluggy

import x402srv.hookspecs as hookspecs
from x402srv.config.models import Config, Network, SettlerSpec
from x402srv.errors import ConfigError, PluginNotFound
from x402srv.interfaces import Clock, CredentialIssuer, Settler, Store, keeps_credits, system_clock
from x402srv.server.plugin_context import PluginContext
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.failover import FailoverSettler
from x402srv.settlement.per_network import NetworkSettlers

__all__ = ["LOAD_PLUGINS_ENV", "Built", "Registry"]

log = logging.getLogger("x402srv.server.registry")

#: The allow-list of third-party plugins to load (entry-point names, comma-separated).
LOAD_PLUGINS_ENV = "X402SRV_LOAD_PLUGINS"

Kind = Literal["store", "settler", "credential issuer"]
_HOOKS: dict[Kind, str] = {
    "store": "register_stores",
    "settler": "register_settlers",
    "credential issuer": "register_credential_issuers",
}
_PROTOCOLS: dict[Kind, type] = {
    "store": Store,
    "settler": Settler,
    "credential issuer": CredentialIssuer,
}


def _protocol_problems(protocol: type, built: object) -> list[str]:
    """What ``built`` lacks to be a ``protocol``: missing members, sync where async is due."""
    members: set[str] = set(getattr(protocol, "__annotations__", {}))
    members.update(name for name in vars(protocol) if not name.startswith("_"))
    problems = []
    for member in sorted(members):
        expected = getattr(protocol, member, None)
        if not hasattr(built, member):
            problems.append(f"no {member!r}")
        elif inspect.iscoroutinefunction(expected) and not inspect.iscoroutinefunction(
            getattr(built, member)
        ):
            problems.append(f"{member!r} is not async")
    return problems


@dataclass(frozen=True, slots=True)
class _Entry:
    factory: Callable[[PluginContext], Any]
    plugin: str


@dataclass(frozen=True, slots=True)
class Built:
    """The plugins a config selects, built but not started.

    ``settler`` is what the pipeline calls: the one network's settler (its
    failover when it has several), or ``settlers`` itself, which routes each
    payment to its network's. ``chains`` has a reader per network with an RPC.
    """

    store: Store
    settler: Settler
    issuer: CredentialIssuer
    chains: dict[str, ChainReader]
    settlers: NetworkSettlers

    @property
    def chain(self) -> ChainReader | None:
        """The first network's reader (the one network of the one-network form)."""
        return next(iter(self.chains.values()), None)

    async def open_chains(self) -> None:
        for chain in self.chains.values():
            await chain.open()

    async def close_chains(self) -> None:
        for chain in self.chains.values():
            await chain.close()


class Registry:
    def __init__(self, *, entry_points: bool = True, extra_plugins: Iterable[object] = ()) -> None:
        from x402srv.default_plugins import DEFAULT_PLUGINS

        self._dists: dict[str, str] = {}
        self.broken: dict[str, str] = {}  # entry-point name -> why it did not load
        self._pm = pluggy.PluginManager("x402srv")
        self._pm.add_hookspecs(hookspecs)
        for module_name in DEFAULT_PLUGINS:
            self._pm.register(importlib.import_module(module_name), name=module_name)
        for plugin in extra_plugins:
            self._pm.register(plugin)
        if entry_points:
            self._load_entry_points()
        self._entries: dict[Kind, dict[str, _Entry]] = {k: self._collect(k) for k in _HOOKS}

    def _load_entry_points(self) -> None:
        """Like pluggy's loader, with the allow-list, and broken plugins set aside."""
        allowed = os.environ.get(LOAD_PLUGINS_ENV)
        wanted = None if allowed is None else {n.strip() for n in allowed.split(",") if n.strip()}
        for entry_point in importlib.metadata.entry_points(group="x402srv"):
            if wanted is not None and entry_point.name not in wanted:
                continue
            if self._pm.get_plugin(entry_point.name) or self._pm.is_blocked(entry_point.name):
                continue
            owner = entry_point.dist.name if entry_point.dist else "?"
            try:
                plugin = entry_point.load()
                self._pm.register(plugin, name=entry_point.name)
            except Exception as exc:
                why = f"distribution {owner}: {type(exc).__name__}: {exc}"
                self.broken[entry_point.name] = why
                log.warning("plugin %r failed to load (%s); it is ignored", entry_point.name, why)
                continue
            if (dist := entry_point.dist) is not None:
                self._dists[entry_point.name] = f"{dist.name} {dist.version}"

    def _collect(self, kind: Kind) -> dict[str, _Entry]:
        entries: dict[str, _Entry] = {}
        hook = getattr(self._pm.hook, _HOOKS[kind])
        for impl in hook.get_hookimpls():
            plugin_name = impl.plugin_name

            def register(name: str, factory: Any, _plugin: str = plugin_name) -> None:
                if name in entries:
                    raise ConfigError(
                        f"{kind} {name!r} is registered by both {entries[name].plugin} "
                        f"and {_plugin}"
                    )
                entries[name] = _Entry(factory, _plugin)

            try:
                impl.function(register=register)
            except ConfigError:
                raise
            except Exception as exc:
                why = f"its {_HOOKS[kind]} hook raised {type(exc).__name__}: {exc}"
                self.broken[plugin_name] = why
                log.warning("plugin %r is ignored: %s", plugin_name, why)
        return entries

    def names(self, kind: Kind) -> list[str]:
        return sorted(self._entries[kind])

    def describe(self) -> list[dict[str, Any]]:
        """One row per plugin: its name, distribution and what it registers."""
        dists = self._dists
        rows: dict[str, dict[str, Any]] = {}
        for kind, entries in self._entries.items():
            for name, entry in sorted(entries.items()):
                row = rows.setdefault(
                    entry.plugin,
                    {"plugin": entry.plugin, "distribution": dists.get(entry.plugin, "built-in")},
                )
                row.setdefault(kind + "s", []).append(name)
        return list(rows.values())

    def _context(self, kind: Kind, section: str, name: str, config: Config, **kw: Any) -> Any:
        """Build plugin ``name`` of ``kind``; ``section`` is the key that chose it.

        Option tables live under the kind's own section (``[store.<plugin>]``,
        ``[settlement.<plugin>]``), also for a settler a ``[[networks]]`` table chose.
        """
        entries = self._entries[kind]
        table_section = {"settler": "settlement"}.get(kind, section.split(".")[0])

        def missing(plugin: str, path: str) -> PluginNotFound:
            installed = ", ".join(sorted(entries)) or "none"
            broken = "".join(f"; {n!r} did not load ({why})" for n, why in self.broken.items())
            return PluginNotFound(
                f"no {kind} plugin named {plugin!r} is installed (installed: {installed}){broken}",
                path=path,
            )

        if name not in entries:
            raise missing(name, section)
        tables = getattr(config, table_section)
        for table in tables.plugin_tables():
            if table not in entries:
                raise missing(table, f"{table_section}.{table}")
        if kind == "store":
            kw["store_builder"] = self._store_builder(config, kw.get("clock", system_clock))
        ctx = PluginContext(
            config=config,
            name=name,
            key_path=f"{table_section}.{name}",
            options=tables.plugin_options(name),
            **kw,
        )
        return self._checked(kind, name, section, entries[name].factory(ctx))

    def _store_builder(
        self, config: Config, clock: Clock, depth: int = 0
    ) -> Callable[[str, str, Mapping[str, Any]], Store]:
        """What ``PluginContext.build_store`` calls: a registered store, by name."""

        def build(name: str, key_path: str, options: Mapping[str, Any]) -> Store:
            if depth >= 4:  # audit(cache(audit(...))): a loop in the config, not a design
                raise ConfigError("stores wrap each other more than 4 deep", path=key_path)
            entries = self._entries["store"]
            if name not in entries:
                installed = ", ".join(sorted(entries)) or "none"
                raise PluginNotFound(
                    f"no store plugin named {name!r} is installed (installed: {installed})",
                    path=key_path,
                )
            ctx = PluginContext(
                config=config,
                name=name,
                key_path=key_path,
                options=options,
                clock=clock,
                store_builder=self._store_builder(config, clock, depth + 1),
            )
            built: Store = self._checked("store", name, key_path, entries[name].factory(ctx))
            return built

        return build

    def _checked(self, kind: Kind, name: str, section: str, built: Any) -> Any:
        """``built`` if it is a ``kind``; a ConfigError naming its distribution if not."""
        entry = self._entries[kind][name]
        problems = _protocol_problems(_PROTOCOLS[kind], built)
        if problems:
            owner = self._dists.get(entry.plugin, "built-in")
            raise ConfigError(
                f"the {kind} {name!r} of plugin {entry.plugin} ({owner}) is not a "
                f"{_PROTOCOLS[kind].__name__}: " + "; ".join(problems),
                path=section,
            )
        return built

    def build_store(self, config: Config, *, clock: Clock = system_clock) -> Store:
        """The store the config names, built and checked but not started."""
        store: Store = self._context(
            "store", "store.backend", config.store.backend, config, clock=clock
        )
        if config.meters_calls and not keeps_credits(store):
            raise ConfigError(
                f"a plan sells calls or limits their rate, but the store {store.name!r} keeps "
                "no credits (it is not a CreditStore); use sqlite, redis or memory",
                path="store.backend",
            )
        return store

    def build(self, config: Config, *, clock: Clock = system_clock) -> Built:
        """Build the store, settlers and issuer the config names (nothing is opened yet)."""
        chains = {
            network.caip2: ChainReader(network.rpc_url)
            for network in config.resolved_networks
            if network.rpc_url
        }
        store = self.build_store(config, clock=clock)
        per_network: dict[str, Settler] = {}
        firsts: dict[str, SettlerSpec] = {}
        for network in config.resolved_networks:
            per_network[network.caip2] = self._settler_of(
                network, config, clock=clock, store=store, chain=chains.get(network.caip2)
            )
            firsts[network.caip2] = network.settlers[0]
        settlers = NetworkSettlers(per_network, firsts)
        issuer = self._context(
            "credential issuer",
            "credentials.issuer",
            config.credentials.issuer,
            config,
            clock=clock,
            store=store,
        )
        return Built(
            store=store,
            settler=settlers.only() or settlers,
            issuer=issuer,
            chains=chains,
            settlers=settlers,
        )

    def _settler_of(
        self,
        network: Network,
        config: Config,
        *,
        clock: Clock,
        store: Store,
        chain: ChainReader | None,
    ) -> Settler:
        """The network's settler: its only one, or a failover over its list."""
        built: list[Settler] = []
        for spec in network.settlers:
            section = f"{spec.path}.strategy"
            built.append(
                self._context(
                    "settler",
                    section,
                    spec.strategy,
                    config,
                    clock=clock,
                    store=store,
                    chain=chain,
                    network=network.options[0],
                    settler=spec,
                )
            )
        if len(built) == 1:
            return built[0]
        settlement = config.settlement
        return FailoverSettler(
            network.caip2,
            list(zip(network.settlers, built, strict=True)),
            chain=chain,
            breaker=settlement.circuit_breaker,
            # the pipeline cuts a settlement at the lease minus 2 s; end before it does
            budget_seconds=max(1.0, settlement.lease_seconds - 3.0),
        )
