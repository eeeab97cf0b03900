"""The pipeline's answer when a shared store's server goes away between settling and recording.

A store that several instances share runs on a server of its own (Redis,
PostgreSQL), and that server can stop at any instant. The worst one is after
the payment's claim is stored and before the settlement's outcome is: the
pipeline must then answer "come back later" (503 when nothing moved, 502 when
the chain may hold the transfer), never a grant and never a 500, and the claim
must still be there when the server is back. docs/plugin-testing.md describes
the kit.

The settler is a stand-in: it stops the real server at the one instant that
matters, which no timing of real processes can hit every time. Everything
else is real: the pipeline, the store, the signed payment. Subclass it in a
test module and provide two fixtures::

    from x402srv.testing import OutageContract

    class TestMyStoreOutage(OutageContract):
        @pytest.fixture
        def store_server(self, start_my_server):
            return start_my_server()  # running; the test stops and starts it

        @pytest.fixture
        async def outage_store(self, store_server):
            return MyStore(store_server.url, prefix=...)  # unopened, data of its own
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest
from eth_account import Account

from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import State
from x402srv.config.models import Config, parse_config
from x402srv.devchain import Devchain
from x402srv.errors import SettlementPending, StoreUnavailable
from x402srv.interfaces import (
    Rejected,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Store,
    Unknown,
)
from x402srv.server.registry import Registry
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import seller_config
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import AccessBody, decode_payment_header

__all__ = ["OutageContract", "StoreDiesDuringSettlement", "StoreServer"]

HOURLY = AccessBody(plan_id="hourly", request_id=None, resource_id="default")


class StoreServer(Protocol):
    """A store's server process as the test kits run it (``RedisServer``, ``PostgresServer``)."""

    @property
    def pid(self) -> int | None:
        """Its PID while it runs, else None."""
        ...

    def start(self) -> object:
        """Start it again on the same port and data, once it was stopped."""
        ...

    def stop(self) -> None:
        """An orderly stop: what was written stays."""
        ...


class StoreDiesDuringSettlement:
    """A settler that sees the store's server stop mid-settlement, then reports ``outcome``."""

    name = "store-dies"

    def __init__(self, server: StoreServer, outcome: SettlementOutcome) -> None:
        self.server = server
        self.outcome = outcome

    async def start(self) -> None:
        """Nothing to connect to."""

    async def close(self) -> None:
        """Nothing to close."""

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        self.server.stop()  # after the claim, before the outcome is recorded
        return self.outcome


class OutageContract:
    """Inherit in a ``Test...`` class that provides ``store_server`` and ``outage_store``."""

    @pytest.fixture
    def outage_config(self, devchain: Devchain, tmp_path: Path) -> Config:
        data = seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=Account.create().address,
            store={"backend": "memory"},  # the store is built by the test
            settlement={"strategy": "facilitator", "facilitator_url": "http://127.0.0.1:9"},
        )
        return parse_config(data, base_dir=tmp_path, env={})

    @pytest.mark.parametrize(
        ("outcome", "answer"),
        [
            (Rejected("unexpected_settle_error"), StoreUnavailable),  # nothing moved: 503
            (Unknown("no receipt in time", "0x" + "ab" * 32), SettlementPending),  # maybe: 502
        ],
    )
    async def test_store_lost_after_settling(
        self,
        outage_config: Config,
        devchain: Devchain,
        store_server: StoreServer,
        outage_store: Store,
        outcome: SettlementOutcome,
        answer: type[Exception],
    ) -> None:
        store = outage_store
        pipeline = AccessPipeline(
            outage_config,
            store=store,
            settler=StoreDiesDuringSettlement(store_server, outcome),
            issuer=Registry().build(outage_config).issuer,
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

            store_server.start()
            record = await store.get_challenge(accepted["extra"]["challengeId"])
            assert record is not None
            # The claim was stored before the settler ran, and nothing released it.
            assert record.state is State.SETTLING
            assert record.payment is not None
        finally:
            await store.close()
            if store_server.pid is None:  # the next test may share it
                store_server.start()
