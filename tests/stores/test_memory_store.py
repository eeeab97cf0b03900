"""The memory store runs the store contract, and refuses to serve several workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.configs import make_config
from x402srv.default_plugins.memory_store import MemoryStore, build_memory_store
from x402srv.errors import ConfigError
from x402srv.interfaces import Store
from x402srv.server.plugin_context import PluginContext
from x402srv.server.registry import Registry
from x402srv.testing import StoreContract
from x402srv.testing.builders import BASE_TIME


class TestMemoryStore(StoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[MemoryStore]:
        store = MemoryStore()
        await store.start()
        yield store
        await store.close()

    def fresh_store(self, store: Store) -> Store:
        return MemoryStore()


async def test_counters_of_ended_windows_leave_memory() -> None:
    """One process's memory must not grow with every client of every past window."""
    store = MemoryStore()
    for window in range(1, 51):
        end = BASE_TIME + 60 * window
        hits = {f"unpaid:198.51.100.{i}:{window}": 1 for i in range(100)}
        assert await store.count_hits(hits, window_end=end, now=end - 30) == hits
    assert len(store._counters) == 100
    assert len(store._counter_ends) == 100


def test_registry_selects_the_memory_store(tmp_path: Path) -> None:
    config = make_config(base_dir=tmp_path, store={"backend": "memory"})
    store = Registry(entry_points=False)._context("store", "store.backend", "memory", config)
    assert isinstance(store, MemoryStore)
    assert isinstance(store, Store)


def test_several_workers_are_refused(tmp_path: Path) -> None:
    """Each worker process would hold its own claims: one payment could be sold twice."""
    config = make_config(base_dir=tmp_path, store={"backend": "memory"}, server={"workers": 2})
    with pytest.raises(ConfigError, match=r"server\.workers = 2") as caught:
        Registry(entry_points=False)._context("store", "store.backend", "memory", config)
    assert caught.value.path == "store.backend"


def test_options_table_rejects_unknown_keys(tmp_path: Path) -> None:
    config = make_config(base_dir=tmp_path, store={"backend": "memory", "memory": {"size": 10}})
    ctx = PluginContext(
        config=config,
        name="memory",
        key_path="store.memory",
        options=config.store.plugin_options("memory"),
    )
    with pytest.raises(ConfigError, match=r"store\.memory\.size: unknown key"):
        build_memory_store(ctx)
