"""Plugins built the way the server builds them, for a plugin's own tests."""

from __future__ import annotations

from x402srv.config.models import Config
from x402srv.interfaces import Clock, Store, system_clock
from x402srv.server.registry import Registry

__all__ = ["build_store"]


def build_store(config: Config, *, clock: Clock = system_clock) -> Store:
    """The store ``config`` selects, from every installed plugin, checked but not started.

    Exactly the server's path: entry points (``X402SRV_LOAD_PLUGINS`` applies), the
    ``[store.<name>]`` option table, the protocol check, and ``PluginContext.build_store``
    for a store that wraps another.
    """
    return Registry().build_store(config, clock=clock)
