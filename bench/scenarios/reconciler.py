"""Reconciler throughput: one pass over 100k records, on each store.

Each store is filled (``import_items``, as ``x402srv import`` does) with PENDING
challenges whose expiresAt has passed, what a flood of unpaid requests leaves
behind; then one reconciler pass, the code ``x402srv reconcile`` and every
server's background task run (``Reconciler.run_once``, in this process),
expires every one of them: a listing page per batch and a compare-and-set per
record. The figure is records per second over the pass, also given as a ratio
to the official middleware's unpaid 402 rate measured in the same run.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from eth_account import Account

from x402srv.access.reconciler import Reconciler
from x402srv.access.records import ChallengeRecord, State
from x402srv.cli.operations import opened
from x402srv.config.models import parse_config
from x402srv.interfaces import ExportedChallenge, PortableStore

from ..stack import GAS_KEY_ENV, HOURLY_AMOUNT, Stack, _key
from ..table import Row

__all__ = ["run"]

SECTION = "Reconciler: one pass expiring PENDING records"
RECORDS = 100_000
#: Records written per ``import_items`` call while filling a store.
FILL_BATCH = 1_000


def _records(stack: Stack, count: int, now: float) -> list[ChallengeRecord]:
    """``count`` unpaid challenges created an hour ago (expired 45 minutes ago)."""
    pay_to = Account.create().address
    return [
        ChallengeRecord.new(
            challenge_id=str(uuid.uuid4()),
            request_id=str(uuid.uuid4()),
            plan_id="hourly",
            resource_id="default",
            amount=str(HOURLY_AMOUNT),
            network=stack.chain.network,
            asset=stack.chain.token.address,
            pay_to=pay_to,
            max_timeout_seconds=300,
            now=now - 3600 + i * 0.001,
            ttl_seconds=900,
        )
        for i in range(count)
    ]


async def _one_pass(stack: Stack, document: dict[str, Any], name: str, count: int) -> float:
    """Fill the store of ``document`` and time one pass; records per second."""
    directory = stack.directory / name
    directory.mkdir(parents=True, exist_ok=True)
    config = parse_config(document, base_dir=directory, env={GAS_KEY_ENV: _key(stack.gas_wallet)})
    now = time.time()
    async with opened(config) as pipeline:
        store = pipeline.store
        assert isinstance(store, PortableStore)
        records = _records(stack, count, now)
        for start in range(0, count, FILL_BATCH):
            chunk = records[start : start + FILL_BATCH]
            await store.import_items([ExportedChallenge(r) for r in chunk], now=now)
        reconciler = Reconciler(pipeline, config.reconciler)
        started = time.perf_counter()
        report = await reconciler.run_once()
        elapsed = time.perf_counter() - started
        expired = sum(change.after is State.EXPIRED for change in report.changes)
        if expired != count:
            raise RuntimeError(f"the pass expired {expired} of {count} records")
    return count / elapsed


def run(stack: Stack, official_rps: float, count: int = RECORDS) -> list[Row]:
    rows = []
    for store in stack.stores:
        document = stack.config(store=store, settlement="gas-wallet")
        rate = asyncio.run(_one_pass(stack, document, f"reconciler-{store}", count))
        rows.append(
            Row(
                SECTION,
                f"x402srv {store}, {count:,} records, one pass",
                f"{rate:8,.0f} records/s  = {rate / official_rps:.2f}x the official 402 rate",
            )
        )
    return rows
