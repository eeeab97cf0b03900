"""Two x402srv servers (two workers each) sharing one store, one anvil and one gas wallet.

This is the deployment a shared store (Redis, PostgreSQL) exists for: a load
balancer in front of several hosts. Everything is a real process:
``python -m x402srv`` twice, the store's own server, anvil, and the official
x402 client as the buyers. Requests alternate between the two servers as a
round-robin balancer would. docs/plugin-testing.md describes the kit.

Subclass it in a test module and provide a ``shared_store`` fixture (class
scope) with the ``[store]`` table both servers use; add the store's own
outage test as a method, where it shares the ``cluster``::

    from x402srv.testing import MultiInstanceContract, SharedStore

    class TestMyStoreInstances(MultiInstanceContract):
        name = "my-store"

        @pytest.fixture(scope="class")
        @classmethod  # a class-scoped fixture is a classmethod (pytest 9)
        def shared_store(cls, my_server):
            return SharedStore(
                table={"backend": "my-store", "url": {"env": "MY_URL"}},
                env={"MY_URL": my_server.url},
                secrets=(my_server.password,),  # never in the servers' logs
            )
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.devchain import Devchain
from x402srv.devchain.token import TransferLog
from x402srv.testing.buyers import encode_payment, paying_client, signed_payment
from x402srv.testing.servers import ServerProcess, seller_config

__all__ = ["Cluster", "MultiInstanceContract", "SharedStore", "problem"]

HOURLY = 100_000
#: The answers after which a paying buyer sends the same payment again.
_RETRY_SAME = {(502, "SETTLEMENT_PENDING"), (409, "SETTLEMENT_IN_PROGRESS")}
GAS_ENV = "X402SRV_TEST_GAS_WALLET_KEY"


@dataclass(frozen=True)
class SharedStore:
    """The ``[store]`` table the servers share, the environment it reads, what must not leak."""

    table: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()


@dataclass
class Cluster:
    """The two running servers, the seller's wallet and the gas wallet's key."""

    servers: list[ServerProcess]
    wallet: str
    chain: Devchain
    gas_key: str
    store: SharedStore

    def access_url(self, i: int) -> str:
        return self.servers[i % len(self.servers)].access_url

    def transfers(self) -> list[TransferLog]:
        return self.chain.transfer_logs(to=self.wallet)

    def logs(self) -> str:
        return "\n".join(server.logs() for server in self.servers)

    def assert_logs_clean(self) -> None:
        """No secret of the store's, not the gas wallet's key, no traceback in any log."""
        logs = self.logs()
        for secret in self.store.secrets:
            assert secret not in logs
        assert self.gas_key[2:] not in logs
        assert "Traceback" not in logs


def problem(response: httpx.Response) -> tuple[int, str | None]:
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


def _nonce_trouble(logs: str) -> list[str]:
    """Log lines about nonces other than the routine "sent <tx> (nonce N)"."""
    return [
        line
        for line in logs.splitlines()
        if "nonce" in line.lower() and "(nonce " not in line and "nonce=" not in line
    ]


def _tx_nonce(devchain: Devchain, tx_hash: str) -> int:
    return int(devchain.rpc.call("eth_getTransactionByHash", [tx_hash])["nonce"], 16)


class MultiInstanceContract:
    """Inherit in a ``Test...`` class that provides the ``shared_store`` fixture."""

    #: The store's name in the timing line the first test prints.
    name: ClassVar[str] = "store"
    #: Settlement and server settings on top of the gas wallet's defaults (a store's
    #: outage test may want short leases).
    settlement_options: ClassVar[Mapping[str, Any]] = {}
    server_options: ClassVar[Mapping[str, Any]] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def cluster(
        cls,
        devchain: Devchain,
        shared_store: SharedStore,
        tmp_path_factory: pytest.TempPathFactory,
    ) -> Iterator[Cluster]:
        gas = devchain.new_account(eth=1000, usdc_atomic=0)
        gas_key = "0x" + bytes(gas.key).hex()
        wallet = Account.create().address
        config = seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=wallet,
            store=shared_store.table,
            settlement={
                "strategy": "gas-wallet",
                "gas_wallet_private_key": {"env": GAS_ENV},
                **cls.settlement_options,
            },
            server=cls.server_options,
        )
        env = {GAS_ENV: gas_key, **shared_store.env}
        servers = [
            ServerProcess(config, tmp_path_factory.mktemp(f"instance-{name}"), workers=2, env=env)
            for name in "ab"
        ]
        try:
            with ThreadPoolExecutor(2) as pool:  # both boot at once, as a rollout would
                list(pool.map(lambda server: server.start(), servers))
            yield Cluster(servers, wallet, devchain, gas_key, shared_store)
        finally:
            for server in servers:
                server.stop()

    # ------------------------------------------------------------ 40 buyers at once

    async def test_forty_buyers_through_both_instances_at_once(
        self, cluster: Cluster, devchain: Devchain, capsys: pytest.CaptureFixture[str]
    ) -> None:
        buyers = [devchain.new_account() for _ in range(40)]
        before = {log.tx_hash for log in cluster.transfers()}

        async def buy(i: int, account: LocalAccount) -> httpx.Response:
            http, _ = paying_client(account)
            async with http:
                response = await http.post(cluster.access_url(i), json={"planId": "hourly"})
                # A settlement still pending (the gas wallet's short receipt wait, which
                # the outage test below needs, ran out on a busy machine) or held by the
                # other instance: the buyer sends the same signed payment again, as the
                # problem's detail says, and gets its grant once the chain shows it.
                deadline = time.monotonic() + 60
                while problem(response) in _RETRY_SAME and time.monotonic() < deadline:
                    await asyncio.sleep(min(float(response.headers.get("Retry-After", "1")), 1.0))
                    response = await http.post(
                        cluster.access_url(i),
                        content=response.request.content,
                        headers={
                            "Content-Type": "application/json",
                            "PAYMENT-SIGNATURE": response.request.headers["PAYMENT-SIGNATURE"],
                        },
                    )
                return response

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
        payers = {log.from_address.lower() for log in transfers}
        assert payers == {b.address.lower() for b in buyers}
        assert all(log.value == HOURLY for log in transfers)
        # One gas wallet, four worker processes on two hosts, its nonce lease in the
        # shared store: its nonces have no gap, no clash.
        nonces = sorted(_tx_nonce(devchain, log.tx_hash) for log in transfers)
        assert nonces == list(range(nonces[0], nonces[0] + 40))
        assert _nonce_trouble(cluster.logs()) == []
        with capsys.disabled():
            print(
                f"\n[{self.name} multi-instance] 40 buyers via 2 instances x 2 workers: "
                f"{elapsed:.2f} s, {40 / elapsed:.1f} settlements/s"
            )

    # ------------------------------------------------------------ one payment, twenty times

    async def test_one_payment_sent_twenty_times_across_instances(
        self, cluster: Cluster, devchain: Devchain
    ) -> None:
        buyer = devchain.new_account()
        async with httpx.AsyncClient(timeout=30) as http:
            challenge = await http.post(cluster.access_url(0), json={"planId": "hourly"})
            assert challenge.status_code == 402
            accepted = challenge.json()["accepts"][0]
            header = encode_payment(signed_payment(buyer, devchain.token, accepted))
            paying = {"PAYMENT-SIGNATURE": header}
            before = len(cluster.transfers())

            responses = await asyncio.gather(
                *(
                    http.post(cluster.access_url(i), json={"planId": "hourly"}, headers=paying)
                    for i in range(20)
                )
            )

            outcomes = Counter(problem(r) for r in responses)
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
                again = await http.post(
                    cluster.access_url(i), json={"planId": "hourly"}, headers=paying
                )
                assert again.status_code == 200
                assert again.json() == grants[0]
        assert len(cluster.transfers()) == before + 1
