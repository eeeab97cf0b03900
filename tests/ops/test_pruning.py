"""What a reconciler pass keeps and what it prunes, with the clock where the test wants it.

Unpaid traffic must not cost storage without bound: records that never got a
payment (EXPIRED, CANCELLED; a stale PENDING one is expired first) and unpaid A2A tasks go after
``unpaid_retention_hours``; delivered purchases stay ``retention_days``,
because their replays must find the grant. Everything runs through the real
reconciler over the configured store (memory here; every store passes the
same prune contract in ``x402srv.testing``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.configs import config_dict, make_config
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import ChallengeRecord, State
from x402srv.cli import operations
from x402srv.config.models import Config
from x402srv.errors import ConfigError
from x402srv.testing.builders import make_grant, make_payment, make_record, new_tx_hash
from x402srv.testing.servers import free_port

NOW = 1_800_000_000.0
HOUR = 3600.0
DAY = 86_400.0


def config() -> Config:
    return make_config(
        config_dict(
            store={"backend": "memory"},
            settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
            reconciler={"unpaid_retention_hours": 2, "retention_days": 2},
        )
    )


def aged(state: State, age: float, **changes: object) -> ChallengeRecord:
    at = NOW - age
    record = make_record(state=state, at=at, expires_at=at + 900, **changes)
    if state is State.DELIVERED:
        record = replace(record, tx_hash=new_tx_hash(), payer="0x" + "ab" * 20)
        record = replace(record, grant=make_grant(record))
    return record


async def test_a_pass_prunes_unpaid_records_and_tasks_after_hours_and_purchases_after_days() -> (
    None
):
    kept = [
        aged(State.PENDING, 60),  # a live challenge
        aged(State.EXPIRED, HOUR),  # unpaid, but younger than the retention
        aged(State.DELIVERED, 3 * HOUR),  # bought: kept for days
        aged(State.PENDING, 3 * HOUR),  # expired by this pass, pruned a retention later
    ]
    pruned = [
        aged(State.EXPIRED, 3 * HOUR),
        aged(State.CANCELLED, 3 * HOUR),
        aged(State.DELIVERED, 3 * DAY),
    ]
    async with operations.opened(config(), clock=lambda: NOW) as pipeline:
        store = pipeline.store
        for record in kept + pruned:
            created = await store.create_challenge(record)
            assert created == (record, True)
        await store.save_task("t-unpaid-old", {"id": 1}, expect_version=None, prune_after=NOW - 1)
        await store.save_task("t-unpaid-new", {"id": 2}, expect_version=None, prune_after=NOW + 1)
        await store.save_task("t-paid", {"id": 3}, expect_version=None)

        report = await Reconciler(pipeline, pipeline.config.reconciler).run_once()

        assert report.pruned == len(pruned)
        assert report.pruned_tasks == 1
        for record in kept:
            assert await store.get_challenge(record.challenge_id) is not None, record.state
        stale = await store.get_challenge(kept[-1].challenge_id)
        assert stale is not None and stale.state is State.EXPIRED
        for record in pruned:
            assert await store.get_challenge(record.challenge_id) is None, record.state
            assert await store.get_by_request_id(record.request_id) is None
        assert await store.get_task("t-unpaid-old") is None
        assert await store.get_task("t-unpaid-new") is not None
        assert await store.get_task("t-paid") is not None


def test_unpaid_retention_must_outlive_a_challenge_and_its_payment_window() -> None:
    with pytest.raises(ConfigError, match="unpaid_retention_hours"):
        make_config(
            config_dict(
                server={"challenge_ttl_seconds": 3000, "max_timeout_seconds": 900},
                reconciler={"unpaid_retention_hours": 1},
            )
        )


async def test_a_pending_record_whose_payment_given_back_the_chain_cannot_decide_is_kept() -> None:
    """Regression: the never-paid prune deleted PENDING records by age, among them one that
    holds a payment a settler gave back (docs/protocol/states.md, "A payment given back")
    while the chain could not be read (here: an RPC URL where nothing listens, as a node
    that is down). The payment may still be sent to the token; pruned, the record and its
    claim were gone and that transfer would pay for nothing. It stays PENDING, with its
    payment, and is listed as unresolved."""
    down = f"http://127.0.0.1:{free_port()}"
    data = config_dict(
        store={"backend": "memory"},
        settlement={
            "strategy": "facilitator",
            "facilitator_url": "http://127.0.0.1:9",
            "rpc_url": down,
        },
        reconciler={"unpaid_retention_hours": 2, "retention_days": 2},
    )
    record = aged(State.PENDING, 3 * HOUR, payment=make_payment(lease_until=NOW - 3 * HOUR))
    async with operations.opened(make_config(data), clock=lambda: NOW) as pipeline:
        assert pipeline.resolver.chain_of(record) is not None, "the record's network is watched"
        await pipeline.store.create_challenge(record)

        report = await Reconciler(pipeline, pipeline.config.reconciler).run_once()

        after = await pipeline.store.get_challenge(record.challenge_id)
        assert after is not None and after.state is State.PENDING
        assert after.payment == record.payment
        assert report.unresolved == [record.challenge_id]
