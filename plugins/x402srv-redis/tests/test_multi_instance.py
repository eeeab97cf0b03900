"""Two x402srv servers (two workers each) sharing one Redis, one anvil and one gas wallet.

This is the deployment the Redis store exists for: a load balancer in front of
several hosts. Everything is a real process: ``python -m x402srv`` twice, a
password-protected ``redis-server`` with an append-only file (restarted
mid-run in the last test), anvil, and the official x402 client as the buyers.
Requests alternate between the two servers as a round-robin balancer would.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, redis_server_binary

from x402srv.access.records import PaymentKey
from x402srv.config.models import Secret
from x402srv.devchain import Devchain, TokenInfo
from x402srv.devchain.token import TransferLog
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment
from x402srv.testing.servers import ServerProcess, seller_config

HOURLY = 100_000
GAS_ENV = "X402SRV_TEST_GAS_WALLET_KEY"
REDIS_ENV = "X402SRV_TEST_REDIS_URL"
#: SETTLING lease of the servers: short, so a settlement caught by the Redis
#: restart is resolved from the chain within the test. The gas wallet needs
#: receipt_timeout < lease - 2 * nonce_lease - 10.
LEASE = 14
GAS_WALLET = {
    "nonce_lease_seconds": 1.5,
    "rpc_timeout_seconds": 1.0,
    "receipt_timeout_seconds": 0.5,
    "poll_interval_seconds": 0.05,
}
#: What a client may be answered besides 200 while Redis is away: 503 (nothing
#: could be stored), 409 (another request holds the settlement), 502 (the chain
#: may hold the transfer; the same request later returns the grant).
OUTAGE_PROBLEMS = {
    (503, "STORE_UNAVAILABLE"),
    (409, "SETTLEMENT_IN_PROGRESS"),
    (502, "SETTLEMENT_PENDING"),
}


@dataclass
class Cluster:
    servers: list[ServerProcess]
    redis: RedisServer
    wallet: str
    prefix: str
    chain: Devchain
    password: str
    gas_key: str

    def access_url(self, i: int) -> str:
        return self.servers[i % len(self.servers)].access_url

    def transfers(self) -> list[TransferLog]:
        return self.chain.transfer_logs(to=self.wallet)

    def logs(self) -> str:
        return "\n".join(server.logs() for server in self.servers)


@pytest.fixture(scope="module")
def cluster(devchain: Devchain, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed (set X402SRV_REDIS_SERVER to its path)")
    password = "redis-" + secrets.token_urlsafe(16)
    redis = RedisServer(tmp_path_factory.mktemp("redis"), password=password, appendonly=True)
    redis.start()
    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    gas_key = "0x" + bytes(gas.key).hex()
    wallet = Account.create().address
    prefix = f"multi-{secrets.token_hex(4)}:"
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={
            "backend": "redis",
            "url": {"env": REDIS_ENV},
            "redis": {
                "key_prefix": prefix,
                "socket_timeout_seconds": 1,
                "connect_timeout_seconds": 1,
                "pool_timeout_seconds": 1,
            },
        },
        settlement={
            "strategy": "gas-wallet",
            "gas_wallet_private_key": {"env": GAS_ENV},
            "lease_seconds": LEASE,
            "gas-wallet": GAS_WALLET,
        },
        # validBefore 10 s ahead: an authorization cut off by the outage runs out
        # before its lease does, so the chain can tell it never moved.
        server={"max_timeout_seconds": 10},
    )
    env = {GAS_ENV: gas_key, REDIS_ENV: redis.url}
    servers = [
        ServerProcess(config, tmp_path_factory.mktemp(f"instance-{name}"), workers=2, env=env)
        for name in "ab"
    ]
    try:
        with ThreadPoolExecutor(2) as pool:  # both boot at once, as a rollout would
            list(pool.map(lambda server: server.start(), servers))
        yield Cluster(servers, redis, wallet, prefix, devchain, password, gas_key)
    finally:
        for server in servers:
            server.stop()
        redis.stop()


@pytest.fixture
async def store(cluster: Cluster) -> AsyncIterator[RedisStore]:
    """The test's own view of what the servers stored."""
    opened = RedisStore(Secret(cluster.redis.url), RedisOptions(key_prefix=cluster.prefix))
    await opened.start()
    yield opened
    await opened.close()


def _nonce_trouble(logs: str) -> list[str]:
    """Log lines about nonces other than the routine "sent <tx> (nonce N)"."""
    return [
        line
        for line in logs.splitlines()
        if "nonce" in line.lower() and "(nonce " not in line and "nonce=" not in line
    ]


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

    failures = [r.text for r in responses if r.status_code != 200]
    assert failures == []
    grants = [r.json() for r in responses]
    assert len({g["challengeId"] for g in grants}) == 40
    transfers = [log for log in cluster.transfers() if log.tx_hash not in before]
    assert len(transfers) == 40
    assert {log.tx_hash for log in transfers} == {g["txHash"] for g in grants}
    assert {log.from_address.lower() for log in transfers} == {b.address.lower() for b in buyers}
    assert all(log.value == HOURLY for log in transfers)
    # One gas wallet, four worker processes on two hosts: its nonces have no gap, no clash.
    nonces = sorted(_tx_nonce(devchain, log.tx_hash) for log in transfers)
    assert nonces == list(range(nonces[0], nonces[0] + 40))
    assert _nonce_trouble(cluster.logs()) == []
    with capsys.disabled():
        print(
            f"\n[multi-instance] 40 buyers via 2 instances x 2 workers: {elapsed:.2f} s, "
            f"{40 / elapsed:.1f} settlements/s"
        )


def _tx_nonce(devchain: Devchain, tx_hash: str) -> int:
    return int(devchain.rpc.call("eth_getTransactionByHash", [tx_hash])["nonce"], 16)


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


# ------------------------------------------------------------ Redis restarted mid-run


@dataclass
class Purchase:
    """One buyer's purchase by requestId, as a patient buyer agent makes it."""

    index: int
    account: LocalAccount
    token: TokenInfo
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    header: str | None = None
    nonce: str | None = None
    answers: list[httpx.Response] = field(default_factory=list)

    @property
    def body(self) -> dict[str, str]:
        return {"planId": "hourly", "requestId": self.request_id}

    @property
    def done(self) -> bool:
        return bool(self.answers) and self.answers[-1].status_code == 200

    async def step(self, http: httpx.AsyncClient, url: str) -> httpx.Response:
        """Get the challenge and sign it if not done yet, else send the signed payment.

        A refused payment (its authorization ran out while the chain decided)
        is signed again for the same challenge, as a buyer agent would.
        """
        if self.header is None:
            response = await http.post(url, json=self.body)
            self.answers.append(response)
            if response.status_code == 402 and "accepts" in response.json():
                payload = signed_payment(self.account, self.token, response.json()["accepts"][0])
                self.nonce = payload["payload"]["authorization"]["nonce"]
                self.header = encode_payment(payload)
            return response
        response = await http.post(url, json=self.body, headers={"PAYMENT-SIGNATURE": self.header})
        self.answers.append(response)
        if _problem(response) == (402, "PAYMENT_FAILED"):
            self.header = None
        return response


async def test_redis_restarted_mid_run(
    cluster: Cluster, devchain: Devchain, store: RedisStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Redis stops (SIGTERM by PID) while payments are in flight and restarts 1.5 s later.

    Sixteen buyers hold a challenge and send their payments just as Redis goes
    away; eight more arrive while it is away. Nothing may answer 500, nothing
    may move on-chain without its claim in Redis, and everyone gets served
    afterwards by the same, never restarted, x402srv processes.
    """
    purchases = [Purchase(i, devchain.new_account(), devchain.token) for i in range(24)]
    in_flight, arriving = purchases[:16], purchases[16:]
    before = {log.tx_hash for log in cluster.transfers()}
    outage: dict[str, float] = {}

    async def restart_redis() -> None:
        await asyncio.sleep(0.08)
        outage["down"] = time.monotonic()
        await asyncio.to_thread(cluster.redis.stop)  # SIGTERM by PID: Redis flushes its AOF
        await asyncio.sleep(1.5)
        await asyncio.to_thread(cluster.redis.start)  # same port, same directory
        outage["up"] = time.monotonic()

    async def pay(purchase: Purchase, http: httpx.AsyncClient, delay: float) -> None:
        await asyncio.sleep(delay)
        await purchase.step(http, cluster.access_url(purchase.index))

    async with httpx.AsyncClient(timeout=30) as http:
        await asyncio.gather(*(p.step(http, cluster.access_url(p.index)) for p in in_flight))
        assert all(p.header is not None for p in in_flight)
        await asyncio.gather(
            restart_redis(),
            *(pay(p, http, 0.01 * n) for n, p in enumerate(in_flight)),
            *(pay(p, http, 0.3 + 0.1 * n) for n, p in enumerate(arriving)),
        )
        during = Counter(_problem(r) for p in purchases for r in p.answers)
        assert set(during) <= {(200, None), (402, None)} | OUTAGE_PROBLEMS, during
        assert during[(503, "STORE_UNAVAILABLE")] >= len(arriving), during

        # Every transfer on the chain was claimed in Redis first, and the claim
        # survived the restart.
        await _claims_cover_transfers(cluster, devchain, store, purchases, before)

        # Service resumes by itself. Settlements the outage cut off are decided
        # from the chain once their lease ends: transferred ones deliver their
        # grant; the others are released once a block is past their validBefore,
        # and their buyer signs again.
        resumed = time.monotonic()
        while not all(p.done for p in purchases) and time.monotonic() < resumed + LEASE + 20:
            if time.monotonic() > resumed + LEASE:
                await asyncio.to_thread(devchain.rpc.mine)
            await asyncio.gather(
                *(p.step(http, cluster.access_url(p.index + 1)) for p in purchases if not p.done)
            )
            await asyncio.sleep(0.5)
        after = Counter(_problem(r) for p in purchases for r in p.answers) - during

    allowed_after = {(200, None), (402, None), (402, "PAYMENT_FAILED")} | OUTAGE_PROBLEMS
    assert set(after) <= allowed_after, after
    stuck = [
        (p.index, [(r.status_code, r.text) for r in p.answers]) for p in purchases if not p.done
    ]
    assert stuck == []
    moved = {log.tx_hash: log for log in cluster.transfers() if log.tx_hash not in before}
    grants = {p.answers[-1].json()["txHash"]: p for p in purchases}
    # Each payment moved exactly once and ended in its grant.
    assert set(moved) == set(grants)
    for tx_hash, purchase in grants.items():
        assert moved[tx_hash].from_address.lower() == purchase.account.address.lower()

    for i in range(2):  # fresh buyers through both instances
        http_client, _ = paying_client(devchain.new_account())
        async with http_client:
            fresh = await http_client.post(cluster.access_url(i), json={"planId": "hourly"})
        assert fresh.status_code == 200, fresh.text
    logs = cluster.logs()
    assert cluster.password not in logs
    assert cluster.gas_key[2:] not in logs
    assert "Traceback" not in logs
    with capsys.disabled():
        print(
            f"\n[multi-instance] Redis down {outage['up'] - outage['down']:.1f} s; answers until "
            f"it was back: {dict(during)}; afterwards: {dict(after)}; "
            f"{len(moved)} transfers, {len(grants)} grants"
        )


async def _claims_cover_transfers(
    cluster: Cluster,
    devchain: Devchain,
    store: RedisStore,
    purchases: list[Purchase],
    before: set[str],
) -> None:
    payers = {log.from_address.lower() for log in cluster.transfers() if log.tx_hash not in before}
    for purchase in purchases:
        if purchase.account.address.lower() not in payers:
            continue
        assert purchase.nonce is not None
        key = PaymentKey(
            devchain.chain_id, devchain.token.address, purchase.account.address, purchase.nonce
        )
        owner = await store.get_by_payment(key)
        assert owner is not None
        assert owner.request_id == purchase.request_id
