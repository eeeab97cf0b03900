"""The audit store over sqlite passes the store contract suite, and writes what it saw.

The store is built the way x402srv builds it, by its factory from a config, so
the suite checks the wrapper around exactly the sqlite store a seller gets.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from x402srv_example.audit_store import AuditStore

from x402srv.plugin import Config, ConfigError, State, Store
from x402srv.testing import StoreContract, build_store
from x402srv.testing.builders import BASE_TIME, make_record
from x402srv.testing.servers import seller_config
from x402srv.testing.store_contract import settling


# --8<-- [start:contract]
def build(directory: Path, **audit: Any) -> AuditStore:
    """``[store] backend = "audit"`` over sqlite, in ``directory``, as the server builds it."""
    document = seller_config(
        rpc_url="http://127.0.0.1:1",  # never called: building a store opens nothing
        chain_id=31337,
        asset="0x5FbDB2315678afecb367f032d93F642f64180aa3",
        wallet_address="0x90F79bf6EB2c4f870365E785982E1f101E93b906",
        store={"backend": "audit", "path": "x402srv.db", "audit": {"wraps": "sqlite", **audit}},
        settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:1"},
    )
    config = Config.model_validate(document, context={"base_dir": directory})
    store = build_store(config)
    assert isinstance(store, AuditStore)
    return store


class TestAuditStoreOverSqlite(StoreContract):
    durable = True  # sqlite underneath: records outlive close(), instances share the file

    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[Store]:
        store = build(tmp_path)
        await store.start()
        yield store
        await store.close()

    def another_store(self, store: Store) -> Store:
        assert isinstance(store, AuditStore)
        return build(store.log_path.parent)


# --8<-- [end:contract]


async def test_each_applied_change_is_one_line_and_a_lost_one_none(tmp_path: Path) -> None:
    store = build(tmp_path, log="audit/changes.jsonl")
    (tmp_path / "audit").mkdir()
    await store.start()
    try:
        record = make_record()
        await store.create_challenge(record)
        await store.create_challenge(record)  # the same requestId again: nothing new
        await store.transition(settling(record))
        await store.transition(settling(record))  # lost: not PENDING any more
    finally:
        await store.close()
    lines = [json.loads(line) for line in store.log_path.read_text().splitlines()]
    assert [(line["from"], line["to"], line["reason"]) for line in lines] == [
        (None, State.PENDING, "created"),
        (State.PENDING, State.SETTLING, "settling"),
    ]
    assert lines[1]["at"] > BASE_TIME


def test_the_wrapped_store_must_be_installed(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^store\.audit\.wrapped: no store plugin named 'nowhere'"
    ):
        build(tmp_path, wraps="nowhere")


def test_a_store_cannot_wrap_itself(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^store\.audit: store 'audit' cannot wrap itself"):
        build(tmp_path, wraps="audit")


def test_the_wrapped_store_options_are_checked_under_their_own_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"store\.audit\.wrapped\.synchronus"):
        build(tmp_path, wrapped={"synchronus": "FULL"})
