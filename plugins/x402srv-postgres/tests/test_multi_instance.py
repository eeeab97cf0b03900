"""Two x402srv servers (two workers each) sharing one PostgreSQL, one anvil and one gas wallet.

The shared tests come from ``x402srv.testing.MultiInstanceContract``; the
PostgreSQL cluster is password-protected, and is stopped and started again in
the last test. Requests alternate between the two servers as a round-robin
balancer would.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import PostgresServer, migrate_schema

from x402srv.devchain import Devchain
from x402srv.plugin import PaymentKey, Secret
from x402srv.testing import MultiInstanceContract, SharedStore
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.multi_instance_contract import Cluster, problem

DSN_ENV = "X402SRV_TEST_POSTGRES_DSN"
PASSWORD = "pg-multi-" + secrets.token_urlsafe(12)
SCHEMA = "multi"


@dataclass
class Payment:
    """A buyer holding a signed payment for its own challenge, sent again until it is served."""

    index: int
    account: LocalAccount
    request_id: str
    header: str
    nonce: str

    @property
    def body(self) -> dict[str, str]:
        return {"planId": "hourly", "requestId": self.request_id}


class TestPostgresInstances(MultiInstanceContract):
    name = "postgres"

    @pytest.fixture(scope="class")
    @classmethod
    def postgres(cls, start_postgres: StartPostgres) -> PostgresServer:
        postgres = start_postgres(password=PASSWORD)
        migrate_schema(postgres.dsn(), SCHEMA)
        return postgres

    @pytest.fixture(scope="class")
    @classmethod
    def shared_store(cls, postgres: PostgresServer) -> SharedStore:
        table = {
            "backend": "postgres",
            "postgres": {
                "dsn": {"env": DSN_ENV},
                "schema": SCHEMA,
                "pool_size": 5,
                "connect_timeout_seconds": 1,
                "pool_timeout_seconds": 1,
            },
        }
        return SharedStore(table, {DSN_ENV: postgres.dsn()}, (PASSWORD,))

    @pytest.fixture
    async def store(self, postgres: PostgresServer) -> AsyncIterator[PostgresStore]:
        """The test's own view of what the servers stored."""
        options = PostgresOptions(dsn=Secret(postgres.dsn()), schema=SCHEMA)
        opened = PostgresStore(options.dsn, options)
        await opened.start()
        yield opened
        await opened.close()

    # ------------------------------------------------------------ PostgreSQL stopped mid-run

    async def test_postgres_stopped_mid_run(
        self, cluster: Cluster, postgres: PostgresServer, devchain: Devchain, store: PostgresStore
    ) -> None:
        """PostgreSQL stops (``pg_ctl stop -m fast``) under unpaid traffic, and starts again.

        Twelve buyers signed their payments before; they send them while it is
        away. Nothing may answer 500 and nothing may be settled: a payment whose
        claim cannot be written is never handed to the chain. Once the server is
        back, the same x402srv processes (never restarted) serve every payment once.
        """
        payments = []
        for i in range(12):
            account = devchain.new_account()
            challenge = httpx.post(cluster.access_url(i), json={"planId": "hourly"}).json()
            payload = signed_payment(account, devchain.token, challenge["accepts"][0])
            nonce = payload["payload"]["authorization"]["nonce"]
            payments.append(
                Payment(i, account, challenge["requestId"], encode_payment(payload), nonce)
            )
        before = {log.tx_hash for log in cluster.transfers()}
        unpaid: list[tuple[int, str | None]] = []
        running = True

        async def unpaid_traffic(http: httpx.AsyncClient) -> None:
            i = 0
            while running:
                unpaid.append(
                    problem(await http.post(cluster.access_url(i), json={"planId": "daily"}))
                )
                i += 1
                await asyncio.sleep(0.01)

        async def pay(http: httpx.AsyncClient, payment: Payment, index: int) -> httpx.Response:
            return await http.post(
                cluster.access_url(index),
                json=payment.body,
                headers={"PAYMENT-SIGNATURE": payment.header},
            )

        async with httpx.AsyncClient(timeout=30) as http:
            traffic = asyncio.create_task(unpaid_traffic(http))
            await asyncio.sleep(0.3)
            await asyncio.to_thread(postgres.stop)
            down = await asyncio.gather(*(pay(http, p, p.index) for p in payments))
            assert Counter(map(problem, down)) == {(503, "STORE_UNAVAILABLE"): len(payments)}
            assert {log.tx_hash for log in cluster.transfers()} == before
            for payment in payments:
                assert not devchain.authorization_state(payment.account.address, payment.nonce)

            await asyncio.to_thread(postgres.start)
            served: dict[int, httpx.Response] = {}
            for attempt in range(20):  # the first request after the restart normally succeeds
                waiting = [p for p in payments if p.index not in served]
                if not waiting:
                    break
                answers = await asyncio.gather(*(pay(http, p, p.index + attempt) for p in waiting))
                for payment, answer in zip(waiting, answers, strict=True):
                    assert problem(answer) in {(200, None), (503, "STORE_UNAVAILABLE")}
                    if answer.status_code == 200:
                        served[payment.index] = answer
                await asyncio.sleep(0.2)
            running = False
            await traffic

        assert sorted(served) == [p.index for p in payments]
        seen = Counter(unpaid)
        assert set(seen) <= {(402, None), (503, "STORE_UNAVAILABLE")}, seen
        assert seen[(503, "STORE_UNAVAILABLE")] >= 1
        moved = {log.tx_hash: log for log in cluster.transfers() if log.tx_hash not in before}
        assert len(moved) == len(payments)
        for payment in payments:
            grant = served[payment.index].json()
            assert moved[grant["txHash"]].from_address.lower() == payment.account.address.lower()
            key = PaymentKey(
                devchain.chain_id, devchain.token.address, payment.account.address, payment.nonce
            )
            owner = await store.get_by_payment(key)
            assert owner is not None
            assert owner.request_id == payment.request_id
        cluster.assert_logs_clean()  # not the password, not the gas key, no traceback
