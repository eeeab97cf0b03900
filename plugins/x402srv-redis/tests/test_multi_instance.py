"""Two x402srv servers (two workers each) sharing one Redis, one anvil and one gas wallet.

The shared tests come from ``x402srv.testing.MultiInstanceContract``; the
Redis is password-protected, has an append-only file, and is restarted
mid-run in the last test. Requests alternate between the two servers as a
round-robin balancer would.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from eth_account.signers.local import LocalAccount
from x402srv_redis import RedisOptions, RedisStore
from x402srv_redis.testing import RedisServer, redis_server_binary

from x402srv.access.records import PaymentKey
from x402srv.config.models import Secret
from x402srv.devchain import Devchain, TokenInfo
from x402srv.testing import MultiInstanceContract, SharedStore
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment
from x402srv.testing.multi_instance_contract import Cluster, problem

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
        if problem(response) == (402, "PAYMENT_FAILED"):
            self.header = None
        return response


class TestRedisInstances(MultiInstanceContract):
    name = "redis"
    settlement_options = {"lease_seconds": LEASE, "gas-wallet": GAS_WALLET}
    # validBefore 10 s ahead: an authorization cut off by the outage runs out
    # before its lease does, so the chain can tell it never moved.
    server_options = {"max_timeout_seconds": 10}

    @pytest.fixture(scope="class")
    @classmethod
    def redis(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
        if redis_server_binary() is None:
            pytest.skip("redis-server is not installed (set X402SRV_REDIS_SERVER to its path)")
        password = "redis-" + secrets.token_urlsafe(16)
        redis = RedisServer(tmp_path_factory.mktemp("redis"), password=password, appendonly=True)
        redis.start()
        try:
            yield redis
        finally:
            redis.stop()

    @pytest.fixture(scope="class")
    @classmethod
    def shared_store(cls, redis: RedisServer) -> SharedStore:
        table = {
            "backend": "redis",
            "url": {"env": REDIS_ENV},
            "redis": {
                "key_prefix": f"multi-{secrets.token_hex(4)}:",
                "socket_timeout_seconds": 1,
                "connect_timeout_seconds": 1,
                "pool_timeout_seconds": 1,
            },
        }
        return SharedStore(table, {REDIS_ENV: redis.url}, (redis.password or "",))

    @pytest.fixture
    async def store(self, cluster: Cluster, redis: RedisServer) -> AsyncIterator[RedisStore]:
        """The test's own view of what the servers stored."""
        prefix = cluster.store.table["redis"]["key_prefix"]
        opened = RedisStore(Secret(redis.url), RedisOptions(key_prefix=prefix))
        await opened.start()
        yield opened
        await opened.close()

    # ------------------------------------------------------------ Redis restarted mid-run

    async def test_redis_restarted_mid_run(
        self,
        cluster: Cluster,
        redis: RedisServer,
        devchain: Devchain,
        store: RedisStore,
        capsys: pytest.CaptureFixture[str],
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
            await asyncio.to_thread(redis.stop)  # SIGTERM by PID: Redis flushes its AOF
            await asyncio.sleep(1.5)
            await asyncio.to_thread(redis.start)  # same port, same directory
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
            during = Counter(problem(r) for p in purchases for r in p.answers)
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
                    *(
                        p.step(http, cluster.access_url(p.index + 1))
                        for p in purchases
                        if not p.done
                    )
                )
                await asyncio.sleep(0.5)
            after = Counter(problem(r) for p in purchases for r in p.answers) - during

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
        cluster.assert_logs_clean()  # not the Redis password, not the gas key, no traceback
        with capsys.disabled():
            print(
                f"\n[multi-instance] Redis down {outage['up'] - outage['down']:.1f} s; answers "
                f"until it was back: {dict(during)}; afterwards: {dict(after)}; "
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
