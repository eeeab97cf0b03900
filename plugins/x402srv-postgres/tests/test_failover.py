"""A primary switch: the primary crashes, its synchronous standby is promoted, nothing is lost.

The documented failover story (README, "Failover"), played for real: a primary
streams to a standby it waits for on every commit (``synchronous_standby_names``,
``pg_basebackup -R``); x402srv has both hosts in its DSN with
``target_session_attrs=read-write``. Buyers purchase; the primary is killed
with SIGKILL; payments sent while no primary exists answer 503 and move
nothing; ``pg_ctl promote`` makes the standby the primary; the same x402srv
processes find it by themselves. Every grant acknowledged before the crash is
on the new primary and answers its replay; the waiting payments are served once.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter

import asyncpg
import httpx
import pytest
from eth_account import Account
from x402srv_postgres.fixtures import StartPostgres
from x402srv_postgres.testing import migrate_schema

from x402srv.devchain import Devchain
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.testing.servers import ServerProcess, seller_config

GAS_ENV = "X402SRV_TEST_GAS_WALLET_KEY"
DSN_ENV = "X402SRV_TEST_POSTGRES_DSN"
PASSWORD = "pg-failover-" + secrets.token_urlsafe(12)
SCHEMA = "failover"


def _signed(devchain: Devchain, url: str) -> tuple[dict[str, str], str, str]:
    """A fresh buyer's (body, PAYMENT-SIGNATURE, payer) for a challenge of its own."""
    buyer = devchain.new_account()
    challenge = httpx.post(url, json={"planId": "hourly"}).json()
    header = encode_payment(signed_payment(buyer, devchain.token, challenge["accepts"][0]))
    return {"planId": "hourly", "requestId": challenge["requestId"]}, header, buyer.address


async def test_a_promoted_synchronous_standby_keeps_every_acknowledged_purchase(
    devchain: Devchain,
    start_postgres: StartPostgres,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    primary = start_postgres(name="primary", password=PASSWORD)
    migrate_schema(primary.dsn(), SCHEMA)
    standby = primary.standby("standby", synchronous=True)
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    dsn = f"postgresql://x402srv:{PASSWORD}@{hosts}/postgres?target_session_attrs=read-write"
    gas = devchain.new_account(eth=1000, usdc_atomic=0)
    wallet = Account.create().address
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={
            "backend": "postgres",
            "postgres": {"dsn": {"env": DSN_ENV}, "schema": SCHEMA, "connect_timeout_seconds": 1},
        },
        settlement={"strategy": "gas-wallet", "gas_wallet_private_key": {"env": GAS_ENV}},
    )
    env = {GAS_ENV: "0x" + bytes(gas.key).hex(), DSN_ENV: dsn}
    server = ServerProcess(config, tmp_path_factory.mktemp("failover"), workers=2, env=env)
    server.start()
    try:
        async with httpx.AsyncClient(timeout=30) as http:

            async def pay(purchase: tuple[dict[str, str], str, str]) -> httpx.Response:
                body, header, _ = purchase
                return await http.post(
                    server.access_url, json=body, headers={"PAYMENT-SIGNATURE": header}
                )

            # Acknowledged before the crash: each 200 is a committed DELIVERED record.
            before = [_signed(devchain, server.access_url) for _ in range(8)]
            answers = await asyncio.gather(*map(pay, before))
            assert [a.status_code for a in answers] == [200] * len(before), answers[0].text
            acknowledged = {a.json()["challengeId"]: a.json() for a in answers}
            waiting = [_signed(devchain, server.access_url) for _ in range(6)]
            transfers = len(devchain.transfer_logs(to=wallet))

            crashed = time.monotonic()
            await asyncio.to_thread(primary.kill)  # SIGKILL: a crash, not a shutdown
            gap = await asyncio.gather(*map(pay, waiting))
            assert Counter(a.status_code for a in gap) == {503: len(waiting)}
            assert {a.json()["code"] for a in gap} == {"STORE_UNAVAILABLE"}
            assert len(devchain.transfer_logs(to=wallet)) == transfers  # nothing moved

            await asyncio.to_thread(standby.promote)
            served: dict[str, httpx.Response] = {}
            for _ in range(40):  # the same processes find the new primary by themselves
                pending = [p for p in waiting if p[2] not in served]
                if not pending:
                    break
                answers = await asyncio.gather(*map(pay, pending))
                for purchase, answer in zip(pending, answers, strict=True):
                    assert answer.status_code in (200, 503), answer.text
                    if answer.status_code == 200:
                        served[purchase[2]] = answer
                await asyncio.sleep(0.1)
            resumed = time.monotonic() - crashed
            assert len(served) == len(waiting)

            # Every acknowledged grant replays identically from the new primary.
            replays = await asyncio.gather(*map(pay, before))
            assert {r.json()["challengeId"]: r.json() for r in replays} == acknowledged
    finally:
        server.stop()

    moved = devchain.transfer_logs(to=wallet)
    assert len(moved) == transfers + len(waiting)
    conn = await asyncpg.connect(standby.dsn())
    try:
        assert await conn.fetchval("SELECT pg_is_in_recovery()") is False
        states = await conn.fetch(
            f"SELECT challenge_id, state FROM {SCHEMA}.challenges WHERE challenge_id = ANY($1)",
            list(acknowledged),
        )
    finally:
        await conn.close()
    assert {row["challenge_id"]: row["state"] for row in states} == dict.fromkeys(
        acknowledged, "DELIVERED"
    )
    logs = server.logs()
    assert PASSWORD not in logs
    assert "Traceback" not in logs
    with capsys.disabled():
        print(
            f"\n[postgres failover] primary killed, standby promoted: {len(acknowledged)} "
            f"acknowledged grants kept, {len(waiting)} waiting payments served once, "
            f"service back {resumed:.1f} s after the crash"
        )
