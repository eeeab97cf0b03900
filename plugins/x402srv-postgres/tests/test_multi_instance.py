"""Two x402srv servers (two workers each) sharing one PostgreSQL, one anvil and one gas wallet.

The deployment the store exists for: a load balancer in front of several hosts.
Everything is a real process: ``python -m x402srv`` twice, a password-protected
PostgreSQL cluster (stopped and started again in the last test), anvil, and the
official x402 client as the buyers. Requests alternate between the two servers
as a round-robin balancer would.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from x402srv_postgres import PostgresOptions, PostgresStore
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import PostgresServer, migrate_schema

from x402srv.devchain import Devchain
from x402srv.devchain.token import TransferLog
from x402srv.plugin import PaymentKey, Secret
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment
from x402srv.testing.servers import ServerProcess, seller_config

HOURLY = 100_000
GAS_ENV = "X402SRV_TEST_GAS_WALLET_KEY"
DSN_ENV = "X402SRV_TEST_POSTGRES_DSN"
PASSWORD = "pg-multi-" + secrets.token_urlsafe(12)
SCHEMA = "multi"


@dataclass
class Cluster:
    servers: list[ServerProcess]
    postgres: PostgresServer
    wallet: str
    chain: Devchain
    gas_key: str

    def access_url(self, i: int) -> str:
        return self.servers[i % len(self.servers)].access_url

    def transfers(self) -> list[TransferLog]:
        return self.chain.transfer_logs(to=self.wallet)

    def logs(self) -> str:
        return "\n".join(server.logs() for server in self.servers)


@pytest.fixture(scope="module")
def cluster(
    devchain: Devchain, start_postgres: StartPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    postgres = start_postgres(password=PASSWORD)
    migrate_schema(postgres.dsn(), SCHEMA)
    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    gas_key = "0x" + bytes(gas.key).hex()
    wallet = Account.create().address
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={
            "backend": "postgres",
            "postgres": {
                "dsn": {"env": DSN_ENV},
                "schema": SCHEMA,
                "pool_size": 5,
                "connect_timeout_seconds": 1,
                "pool_timeout_seconds": 1,
            },
        },
        settlement={"strategy": "gas-wallet", "gas_wallet_private_key": {"env": GAS_ENV}},
    )
    env = {GAS_ENV: gas_key, DSN_ENV: postgres.dsn()}
    servers = [
        ServerProcess(config, tmp_path_factory.mktemp(f"instance-{name}"), workers=2, env=env)
        for name in "ab"
    ]
    try:
        with ThreadPoolExecutor(2) as pool:  # both boot at once, as a rollout would
            list(pool.map(lambda server: server.start(), servers))
        yield Cluster(servers, postgres, wallet, devchain, gas_key)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
async def store(cluster: Cluster) -> AsyncIterator[PostgresStore]:
    """The test's own view of what the servers stored."""
    options = PostgresOptions(dsn=Secret(cluster.postgres.dsn()), schema=SCHEMA)
    opened = PostgresStore(options.dsn, options)
    await opened.start()
    yield opened
    await opened.close()


def _problem(response: httpx.Response) -> tuple[int, str | None]:
    """(status, problem code); a 402 offer and a 200 grant have no code."""
    if response.status_code == 200:
        return 200, None
    if response.status_code == 402 and "accepts" in response.json():
        return 402, None
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    body = response.json()
    assert "Traceback" not in response.text
    assert body["status"] == response.status_code
    if response.status_code in (409, 502, 503):  # "come back later" answers say when
        assert int(response.headers["retry-after"]) >= 1, response.headers
    return response.status_code, body["code"]


def _tx_nonce(devchain: Devchain, tx_hash: str) -> int:
    return int(devchain.rpc.call("eth_getTransactionByHash", [tx_hash])["nonce"], 16)


# ------------------------------------------------------------ 40 buyers at once


async def test_forty_buyers_through_both_instances_at_once(
    cluster: Cluster, devchain: Devchain, capsys: pytest.CaptureFixture[str]
) -> None:
    buyers = [devchain.new_account() for _ in range(40)]
    before = {log.tx_hash for log in cluster.transfers()}

    async def buy(i: int, account: LocalAccount) -> httpx.Response:
        http, _ = paying_client(account)
        async with http:
            return await http.post(cluster.access_url(i), json={"planId": "hourly"})

    started = time.perf_counter()
    responses = await asyncio.gather(*(buy(i, b) for i, b in enumerate(buyers)))
    elapsed = time.perf_counter() - started

    assert [r.text for r in responses if r.status_code != 200] == []
    grants = [r.json() for r in responses]
    assert len({g["challengeId"] for g in grants}) == 40
    transfers = [log for log in cluster.transfers() if log.tx_hash not in before]
    assert len(transfers) == 40
    assert {log.tx_hash for log in transfers} == {g["txHash"] for g in grants}
    assert {log.from_address.lower() for log in transfers} == {b.address.lower() for b in buyers}
    assert all(log.value == HOURLY for log in transfers)
    # One gas wallet, four worker processes on two hosts, its nonce lease in PostgreSQL:
    # no gap, no clash.
    nonces = sorted(_tx_nonce(devchain, log.tx_hash) for log in transfers)
    assert nonces == list(range(nonces[0], nonces[0] + 40))
    with capsys.disabled():
        print(
            f"\n[postgres multi-instance] 40 buyers via 2 instances x 2 workers: {elapsed:.2f} s, "
            f"{40 / elapsed:.1f} settlements/s"
        )


# ------------------------------------------------------------ one payment, twenty times


async def test_one_payment_sent_twenty_times_across_instances(
    cluster: Cluster, devchain: Devchain
) -> None:
    buyer = devchain.new_account()
    challenge = httpx.post(cluster.access_url(0), json={"planId": "hourly"})
    assert challenge.status_code == 402
    accepted = challenge.json()["accepts"][0]
    header = encode_payment(signed_payment(buyer, devchain.token, accepted))
    before = len(cluster.transfers())

    async with httpx.AsyncClient(timeout=30) as http:
        responses = await asyncio.gather(
            *(
                http.post(
                    cluster.access_url(i),
                    json={"planId": "hourly"},
                    headers={"PAYMENT-SIGNATURE": header},
                )
                for i in range(20)
            )
        )

    outcomes = Counter(_problem(r) for r in responses)
    assert set(outcomes) <= {(200, None), (409, "SETTLEMENT_IN_PROGRESS")}, outcomes
    assert outcomes[(200, None)] >= 1
    grants = [r.json() for r in responses if r.status_code == 200]
    assert all(grant == grants[0] for grant in grants)
    assert grants[0]["challengeId"] == challenge.json()["challengeId"]
    transfers = cluster.transfers()[before:]
    assert [(t.tx_hash, t.from_address.lower()) for t in transfers] == [
        (grants[0]["txHash"], buyer.address.lower())
    ]
    for i in range(2):  # later, either instance answers the same grant
        again = httpx.post(
            cluster.access_url(i), json={"planId": "hourly"}, headers={"PAYMENT-SIGNATURE": header}
        )
        assert again.status_code == 200
        assert again.json() == grants[0]
    assert len(cluster.transfers()) == before + 1


# ------------------------------------------------------------ PostgreSQL stopped mid-run


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


async def test_postgres_stopped_mid_run(
    cluster: Cluster, devchain: Devchain, store: PostgresStore
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
        payments.append(Payment(i, account, challenge["requestId"], encode_payment(payload), nonce))
    before = {log.tx_hash for log in cluster.transfers()}
    unpaid: list[tuple[int, str | None]] = []
    running = True

    async def unpaid_traffic(http: httpx.AsyncClient) -> None:
        i = 0
        while running:
            unpaid.append(
                _problem(await http.post(cluster.access_url(i), json={"planId": "daily"}))
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
        await asyncio.to_thread(cluster.postgres.stop)
        down = await asyncio.gather(*(pay(http, p, p.index) for p in payments))
        assert Counter(map(_problem, down)) == {(503, "STORE_UNAVAILABLE"): len(payments)}
        assert {log.tx_hash for log in cluster.transfers()} == before
        for payment in payments:
            assert not devchain.authorization_state(payment.account.address, payment.nonce)

        await asyncio.to_thread(cluster.postgres.start)
        served: dict[int, httpx.Response] = {}
        for attempt in range(20):  # the first request after the restart normally succeeds
            waiting = [p for p in payments if p.index not in served]
            if not waiting:
                break
            answers = await asyncio.gather(*(pay(http, p, p.index + attempt) for p in waiting))
            for payment, answer in zip(waiting, answers, strict=True):
                assert _problem(answer) in {(200, None), (503, "STORE_UNAVAILABLE")}
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
    logs = cluster.logs()
    assert PASSWORD not in logs
    assert cluster.gas_key[2:] not in logs
    assert "Traceback" not in logs
