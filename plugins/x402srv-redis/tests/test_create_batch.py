"""Unpaid creates coalesce into one ``CREATE`` call per round trip, each decided on its own.

The first half drives ``Coalescer`` with a send function the test holds open
(the event it waits on is the round trip), the second half runs the store
against a real redis-server and counts the server's own ``EVALSHA`` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
import redis.asyncio as aioredis
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.store import _Create
from x402srv_redis.testing import RedisServer, StartRedis

from x402srv.access.records import ChallengeRecord, PaymentKey
from x402srv.config.models import Secret
from x402srv.errors import StoreUnavailable
from x402srv.interfaces import PaymentClaimed
from x402srv.plugin import Coalescer
from x402srv.stores.rules import encode_record
from x402srv.testing.builders import make_key, make_record

# ------------------------------------------------------------ the coalescer


class Wire:
    """A send function whose round trips the test ends, one ``answer()`` at a time."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.replied = asyncio.Event()
        self.failure: Exception | None = None

    async def send(self, batch: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(batch)
        await self.replied.wait()
        self.replied.clear()
        if self.failure is not None:
            raise self.failure
        return [ValueError(f"odd {n}") if n % 2 else n * 10 for n in batch]

    async def answer(self) -> None:
        self.replied.set()
        for _ in range(5):  # let the drain and the callers run
            await asyncio.sleep(0)


async def test_a_call_on_an_idle_coalescer_goes_out_at_once_alone() -> None:
    wire = Wire()
    coalescer = Coalescer(wire.send, max_batch=8)
    call = asyncio.ensure_future(coalescer.submit(2))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert wire.batches == [[2]]  # sent without waiting for company or a timer
    await wire.answer()
    assert call.result() == 20


async def test_calls_arriving_during_a_round_trip_leave_together_next() -> None:
    wire = Wire()
    coalescer = Coalescer(wire.send, max_batch=3)
    first = asyncio.ensure_future(coalescer.submit(0))
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(coalescer.submit(n)) for n in (2, 4, 6, 8)]
    await asyncio.sleep(0)
    assert wire.batches == [[0]]
    await wire.answer()
    assert wire.batches == [[0], [2, 4, 6]]  # at most max_batch per call
    await wire.answer()
    assert wire.batches == [[0], [2, 4, 6], [8]]
    await wire.answer()
    assert first.result() == 0
    assert [call.result() for call in later] == [20, 40, 60, 80]


async def test_an_item_that_fails_fails_alone_and_a_failed_call_fails_its_batch() -> None:
    wire = Wire()
    coalescer = Coalescer(wire.send, max_batch=8)
    calls = [asyncio.ensure_future(coalescer.submit(n)) for n in (1, 2)]
    await asyncio.sleep(0)
    await wire.answer()
    assert isinstance(calls[0].exception(), ValueError)
    assert calls[1].result() == 20
    wire.failure = RuntimeError("lost")
    calls = [asyncio.ensure_future(coalescer.submit(n)) for n in (4, 6)]
    await asyncio.sleep(0)
    await wire.answer()
    assert all(isinstance(call.exception(), RuntimeError) for call in calls)
    wire.failure = None
    call = asyncio.ensure_future(coalescer.submit(8))  # the next batch goes out as usual
    await asyncio.sleep(0)
    await wire.answer()
    assert call.result() == 80


async def test_a_caller_cancelled_before_its_batch_leaves_is_dropped() -> None:
    wire = Wire()
    coalescer = Coalescer(wire.send, max_batch=8)
    first = asyncio.ensure_future(coalescer.submit(0))
    await asyncio.sleep(0)
    gone, kept = (asyncio.ensure_future(coalescer.submit(n)) for n in (2, 4))
    await asyncio.sleep(0)
    gone.cancel()
    await wire.answer()
    await wire.answer()
    assert wire.batches == [[0], [4]]
    assert (first.result(), kept.result()) == (0, 40)


async def test_drained_waits_for_every_queued_call() -> None:
    wire = Wire()
    coalescer = Coalescer(wire.send, max_batch=8)
    calls = [asyncio.ensure_future(coalescer.submit(0))]
    await asyncio.sleep(0)
    calls.append(asyncio.ensure_future(coalescer.submit(2)))  # queued behind [0]
    drained = asyncio.ensure_future(coalescer.drained())
    await wire.answer()
    assert not drained.done()
    await wire.answer()
    await drained
    assert [call.result() for call in calls] == [0, 20]


# ------------------------------------------------------------ the store on a real Redis


@pytest.fixture
async def counted(start_redis: StartRedis) -> AsyncIterator[tuple[RedisStore, aioredis.Redis]]:
    """A store on a server of its own, and a client to read that server's command counts."""
    server: RedisServer = start_redis()
    store = RedisStore(Secret(server.url), RedisOptions())
    await store.start()
    admin = aioredis.Redis.from_url(server.url, decode_responses=True)
    await store.create_challenge(make_record())  # loads the script (NOSCRIPT, then EVALSHA)
    yield store, admin
    await admin.aclose()
    await store.close()


async def _evalsha_calls(admin: aioredis.Redis) -> int:
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_concurrent_unpaid_creates_share_one_round_trip(
    counted: tuple[RedisStore, aioredis.Redis],
) -> None:
    store, admin = counted
    before = await _evalsha_calls(admin)
    records = [make_record() for _ in range(50)]
    results = await asyncio.gather(*(store.create_challenge(r) for r in records))
    assert results == [(r, True) for r in records]
    assert await _evalsha_calls(admin) - before == 1
    found = await asyncio.gather(*(store.get_by_request_id(r.request_id) for r in records))
    assert found == records


async def test_a_create_with_a_payment_is_a_call_of_its_own(
    counted: tuple[RedisStore, aioredis.Redis],
) -> None:
    """A paying buyer's create never waits behind a batch of unpaid ones."""
    store, admin = counted
    before = await _evalsha_calls(admin)
    paid, key = make_record(), make_key()
    unpaid = [make_record() for _ in range(20)]
    results = await asyncio.gather(
        *(store.create_challenge(r) for r in unpaid[:10]),
        store.create_challenge(paid, claim_payment=key),
        *(store.create_challenge(r) for r in unpaid[10:]),
    )
    assert results[10] == (paid, True)
    assert await _evalsha_calls(admin) - before == 2
    assert await store.get_by_payment(key) == paid


async def test_one_call_decides_its_creates_in_order(
    redis_server: RedisServer, key_prefix: str
) -> None:
    """Within one ``CREATE`` call each create sees those before it, as if sent one by one."""
    store = RedisStore(Secret(redis_server.url), RedisOptions(key_prefix=key_prefix))
    await store.start()
    try:
        first, key = make_record(), make_key()
        same_request = make_record(request_id=first.request_id)
        same_id = make_record(challenge_id=first.challenge_id)
        claimer = make_record()
        loser = make_record()
        outcomes = await store._create_batch(
            [
                _create(first),
                _create(same_request),
                _create(same_id),
                _create(claimer, key),
                _create(loser, key),
                _create(claimer, key),  # the same create again: its requestId wins
                _create(make_record(challenge_id=claimer.challenge_id), key),
            ]
        )
        assert outcomes[:2] == [(first, True), (first, False)]
        assert isinstance(outcomes[2], ValueError)
        assert outcomes[3:5] == [(claimer, True), PaymentClaimed(claimer.challenge_id)]
        assert outcomes[5] == (claimer, False)
        assert isinstance(outcomes[6], ValueError)
        assert await store.get_by_request_id(first.request_id) == first
        assert await store.get_by_payment(key) == claimer
        assert await store.get_challenge(loser.challenge_id) is None
        listed = await store.list_challenges()  # same updated_at: by challengeId
        assert listed == sorted([first, claimer], key=lambda r: r.challenge_id)
    finally:
        await store.close()


async def test_an_outage_fails_every_create_of_the_batch_until_it_ends(
    start_redis: StartRedis,
) -> None:
    server = start_redis()
    store = RedisStore(Secret(server.url), RedisOptions(connect_timeout_seconds=1))
    await store.start()
    try:
        server.stop()
        records = [make_record() for _ in range(20)]
        failed = await asyncio.gather(
            *(store.create_challenge(r) for r in records), return_exceptions=True
        )
        assert all(isinstance(exc, StoreUnavailable) for exc in failed)
        assert len({id(exc) for exc in failed}) == len(failed)  # one error per caller
        server.start()
        results = await asyncio.gather(*(store.create_challenge(r) for r in records))
        assert results == [(r, True) for r in records]
    finally:
        await store.close()


async def test_closing_answers_the_creates_already_queued(
    redis_server: RedisServer, key_prefix: str
) -> None:
    store = RedisStore(Secret(redis_server.url), RedisOptions(key_prefix=key_prefix))
    await store.start()
    records = [make_record() for _ in range(10)]
    *results, _ = await asyncio.gather(*(store.create_challenge(r) for r in records), store.close())
    assert results == [(r, True) for r in records]
    with pytest.raises(StoreUnavailable):
        await store.create_challenge(make_record())


def _create(record: ChallengeRecord, key: PaymentKey | None = None) -> _Create:
    return _Create(record, encode_record(record), str(key or ""))
