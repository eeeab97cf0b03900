"""Store round trips per request kind, counted on the real pipeline.

The access pipeline runs in this process over the real sqlite store, the
gas-wallet settler on anvil and the jwt issuer, built by the registry exactly
as ``python -m x402srv`` builds them, except that the store is registered as
``counted-sqlite``: the sqlite store wrapped in ``CountingStore``, which counts
every call by method (the settler's nonce lease included, since the settler
gets the same store). Three requests of one purchase are counted: the challenge (no payment),
the paid retry (settlement, grant), and a replay of the delivered grant by
requestId.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
from collections.abc import Callable
from typing import Any

from x402srv import hookimpl
from x402srv.access.pipeline import AccessPipeline, AccessRequest
from x402srv.config.models import load_config
from x402srv.default_plugins.sqlite.store import build_sqlite_store
from x402srv.server.registry import Registry
from x402srv.testing import toml
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.wire.offers import PaymentOffer

from ..stack import GAS_KEY_ENV, Stack, _key
from ..table import Row

__all__ = ["CountingStore", "run"]

SECTION = "Store round trips per request (sqlite; gas-wallet settlement)"


class CountingStore:
    """Any ``Store``, with every awaited call counted by method name."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await value(*args, **kwargs)

        return counted

    def take(self) -> collections.Counter[str]:
        calls, self.calls = self.calls, collections.Counter()
        return calls


class _CountedSqlite:
    """A plugin registering ``counted-sqlite``: the sqlite store behind a ``CountingStore``."""

    def __init__(self) -> None:
        self.stores: list[CountingStore] = []

    @hookimpl
    def register_stores(self, register: Callable[[str, Any], None]) -> None:
        def build(ctx: Any) -> CountingStore:
            store = CountingStore(build_sqlite_store(ctx))
            self.stores.append(store)
            return store

        register("counted-sqlite", build)


def _describe(calls: collections.Counter[str]) -> str:
    ignore = {"open", "close", "ping"}
    shown = {name: n for name, n in calls.items() if name not in ignore}
    parts = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in shown.items())
    return f"{sum(shown.values()):2d}  ({parts})"


async def _count(stack: Stack) -> list[tuple[str, collections.Counter[str]]]:
    directory = stack.directory / "roundtrips"
    directory.mkdir(parents=True, exist_ok=True)
    document = stack.config(store="sqlite", settlement="gas-wallet")
    document["store"]["backend"] = "counted-sqlite"
    (directory / "seller.toml").write_text(toml.dumps(document))
    os.environ[GAS_KEY_ENV] = _key(stack.gas_wallet)
    config = load_config(str(directory / "seller.toml"))
    plugin = _CountedSqlite()
    built = Registry(extra_plugins=[plugin]).build(config)
    [store] = plugin.stores
    pipeline = AccessPipeline(
        config,
        store=built.store,
        settler=built.settler,
        issuer=built.issuer,
        chain=built.chain,
    )
    await built.store.start()
    if built.chain is not None:
        await built.chain.open()
    await built.settler.start()
    await built.issuer.start()
    try:
        return await _requests(stack, pipeline, store)
    finally:
        await built.issuer.close()
        await built.settler.close()
        if built.chain is not None:
            await built.chain.close()
        await built.store.close()


async def _requests(
    stack: Stack, pipeline: AccessPipeline, store: CountingStore
) -> list[tuple[str, collections.Counter[str]]]:
    request_id = "6de3a3bd-bf25-42d1-9d7a-805b7e278263"
    body = json.dumps({"planId": "hourly", "requestId": request_id}).encode()

    def request(signature: str | None = None) -> AccessRequest:
        return AccessRequest(body, "application/json", signature)

    counted: list[tuple[str, collections.Counter[str]]] = []
    offer = await pipeline.handle(request())
    counted.append(("challenge (402, new PENDING record)", store.take()))
    assert isinstance(offer, PaymentOffer)
    accepted = json.loads(base64.b64decode(offer.header))["accepts"][0]
    buyer = stack.chain.new_account(eth=0, usdc_atomic=10**9)
    payment = encode_payment(signed_payment(buyer, stack.chain.token, accepted))
    await pipeline.handle(request(payment))
    counted.append(("paid retry (settle, PAID, grant)", store.take()))
    await pipeline.handle(request())
    counted.append(("replay of a delivered grant", store.take()))
    return counted


def run(stack: Stack) -> list[Row]:
    return [Row(SECTION, kind, _describe(calls)) for kind, calls in asyncio.run(_count(stack))]
