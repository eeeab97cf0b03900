"""The pipeline's answer when PostgreSQL goes away between settling and recording.

The settler is a stand-in: it stops the real server at the one instant that
matters (after the claim is committed, before the outcome is recorded), which
no timing of real processes can hit every time. Everything else is real: the
pipeline, the PostgreSQL store, the signed payment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from eth_account import Account
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import PostgresServer

from x402srv.access.pipeline import AccessPipeline
from x402srv.config.models import Config, parse_config
from x402srv.devchain import Devchain
from x402srv.errors import SettlementPending
from x402srv.plugin import (
    Rejected,
    Secret,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    State,
    StoreUnavailable,
    Unknown,
)
from x402srv.server.registry import Registry
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import AccessBody, decode_payment_header

HOURLY = AccessBody(plan_id="hourly", request_id=None, resource_id="default")


class PostgresDiesDuringSettlement:
    """A settler that sees PostgreSQL stop mid-settlement, then reports ``outcome``."""

    name = "postgres-dies"

    def __init__(self, server: PostgresServer, outcome: SettlementOutcome) -> None:
        self.server = server
        self.outcome = outcome

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Nothing to close."""

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        self.server.stop()  # pg_ctl stop -m fast: committed transactions stay
        return self.outcome


@pytest.fixture
def config(devchain: Devchain, tmp_path: Path) -> Config:
    data = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=Account.create().address,
        store={"backend": "memory"},  # the store is built by the test
        settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
    )
    return parse_config(data, base_dir=tmp_path, env={})


@pytest.fixture(scope="module")
def server(start_postgres: StartPostgres) -> PostgresServer:
    return start_postgres()


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
    server: PostgresServer,
    postgres_schema: str,
    outcome: SettlementOutcome,
    answer: type[Exception],
) -> None:
    options = PostgresOptions(dsn=Secret(server.dsn()), schema=postgres_schema)
    store = PostgresStore(options.dsn, options)
    await store.migrate()
    pipeline = AccessPipeline(
        config,
        store=store,
        settler=PostgresDiesDuringSettlement(server, outcome),
        issuer=Registry().build(config).issuer,
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
        # The claim was committed before the settler ran, and nothing released it.
        assert record.state is State.SETTLING
        assert record.payment is not None
    finally:
        await store.close()
        server.start()
