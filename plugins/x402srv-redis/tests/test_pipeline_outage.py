"""The pipeline's answer when Redis goes away between settling and recording.

The multi-instance test restarts Redis under load and sees these cases now and
then; here each is pinned. The settler is a stand-in: it stops the real
redis-server at the one instant that matters (after the claim, before the
outcome is recorded), which no timing of real processes can hit every time.
Everything else is real: the pipeline, the Redis store, the signed payment.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from eth_account import Account
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, StartRedis

from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import State
from x402srv.config.models import Config, Secret, parse_config
from x402srv.devchain import Devchain
from x402srv.errors import SettlementPending, StoreUnavailable
from x402srv.interfaces import (
    Rejected,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Unknown,
)
from x402srv.server.registry import Registry
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import AccessBody, decode_payment_header

HOURLY = AccessBody(plan_id="hourly", request_id=None, resource_id="default")


class RedisDiesDuringSettlement:
    """A settler that sees Redis stop mid-settlement, then reports ``outcome``."""

    name = "redis-dies"

    def __init__(self, server: RedisServer, outcome: SettlementOutcome) -> None:
        self.server = server
        self.outcome = outcome

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Nothing to close."""

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        self.server.stop()  # SIGTERM by PID; the AOF keeps what was written
        return self.outcome


@pytest.fixture
def config(devchain: Devchain, tmp_path: Path) -> Config:
    data = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=Account.create().address,
        store={"backend": "redis", "url": "redis://127.0.0.1:1/0"},  # replaced per test
        settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
    )
    return parse_config(data, base_dir=tmp_path, env={})


@pytest.fixture
async def server(start_redis: StartRedis) -> AsyncIterator[RedisServer]:
    server = start_redis(appendonly=True)
    yield server
    if server.process is None:
        server.start()


@pytest.mark.parametrize(
    ("outcome", "answer"),
    [
        (Rejected("unexpected_settle_error"), StoreUnavailable),  # nothing moved: 503
        (Unknown("no receipt in time", "0x" + "ab" * 32), SettlementPending),  # maybe moved: 502
    ],
)
async def test_store_lost_after_settling(
    config: Config,
    devchain: Devchain,
    server: RedisServer,
    key_prefix: str,
    outcome: SettlementOutcome,
    answer: type[Exception],
) -> None:
    store = RedisStore(Secret(server.url), RedisOptions(key_prefix=key_prefix))
    issuer = Registry().build(config).issuer
    pipeline = AccessPipeline(
        config,
        store=store,
        settler=RedisDiesDuringSettlement(server, outcome),
        issuer=issuer,
        chain=None,
    )
    await store.start()
    try:
        offer = await pipeline.access(HOURLY, None)
        assert isinstance(offer, PaymentOffer)
        accepted = offer.body["accepts"][0]
        buyer = devchain.new_account(eth=0, usdc_atomic=0)
        payment = decode_payment_header(
            encode_payment(signed_payment(buyer, devchain.token, accepted))
        )
        with pytest.raises(answer) as caught:
            await pipeline.access(HOURLY, payment)
        assert caught.value.__suppress_context__

        server.start()
        record = await store.get_challenge(accepted["extra"]["challengeId"])
        assert record is not None
        # The claim was stored before the settler ran, and nothing released it.
        assert record.state is State.SETTLING
        assert record.payment is not None
    finally:
        await store.close()
