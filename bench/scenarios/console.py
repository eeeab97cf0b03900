"""The seller's console on a store with 100k purchases: how fast its API answers.

Each store is filled (``import_items``, as ``x402srv import`` does) with 100k
delivered purchases spread over the last 30 days, from 1,000 payers, and with
the counters the tally would have left for them (per hour: settled, delivered,
ten times as many unpaid requests, the settler's calls). Then x402srv serves
it with ``[admin]`` on a port of its own, and the admin API is asked one
request after another (keep-alive, after a warm-up): the overview (last 7 days
by day, what the console opens on; and 30 days), the newest page of
purchases, a payer's purchases, and the grants. The figures are p50, p95 and
p99 latency per endpoint; the target (issue 19) is the overview under 50 ms at
p95, which holds because it reads counters, never the records.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter
from typing import Any

import httpx
from eth_account import Account

from x402srv.access.records import ChallengeRecord, PaymentDetails, State, Transition
from x402srv.cli.operations import opened
from x402srv.config.models import parse_config
from x402srv.interfaces import ExportedChallenge, PortableStore
from x402srv.testing.servers import free_port
from x402srv.usage.counters import hour_of

from ..stack import GAS_KEY_ENV, HOURLY_AMOUNT, Stack, _key
from ..table import Row, Verdict, verdict

__all__ = ["PURCHASES", "run"]

SECTION = "Seller's console: admin API latency on a store with 100k purchases"
PURCHASES = 100_000
PAYERS = 1_000
DAYS = 30
FILL_BATCH = 1_000
ADMIN_TOKEN = "bench-admin-token-" + "b" * 24
WARMUP, REQUESTS = 20, 200


def _purchases(stack: Stack, count: int, now: float) -> list[ChallengeRecord]:
    """``count`` delivered purchases, evenly over the last ``DAYS`` days, newest last."""
    payers = [Account.create().address for _ in range(PAYERS)]
    pay_to = Account.create().address
    span = DAYS * 86_400
    records = []
    for i in range(count):
        at = now - span + span * i / count
        payer = payers[i % PAYERS]
        tx_hash = "0x" + uuid.uuid4().hex * 2
        payment = PaymentDetails(
            payer=payer,
            nonce="0x" + uuid.uuid4().hex * 2,
            value=str(HOURLY_AMOUNT),
            valid_after=0,
            valid_before=int(at) + 300,
            signature="0x" + "11" * 65,
            key=f"{stack.chain.chain_id}:{stack.chain.token.address.lower()}:{payer.lower()}:{i}",
            attempt_id=uuid.uuid4().hex,
            lease_until=at,
            submitted=True,
        )
        record = ChallengeRecord.new(
            challenge_id=str(uuid.uuid4()),
            request_id=str(uuid.uuid4()),
            plan_id="hourly",
            resource_id="default",
            amount=str(HOURLY_AMOUNT),
            network=stack.chain.network,
            asset=stack.chain.token.address,
            pay_to=pay_to,
            max_timeout_seconds=300,
            now=at,
            ttl_seconds=900,
        )
        history = (
            *record.history,
            Transition(State.SETTLING, at, "settlement started"),
            Transition(State.PAID, at, "settled on-chain"),
            Transition(State.DELIVERED, at, "credential issued"),
        )
        records.append(
            record.__class__(
                **{
                    **{f: getattr(record, f) for f in record.__dataclass_fields__},
                    "state": State.DELIVERED,
                    "payment": payment,
                    "payer": payer,
                    "tx_hash": tx_hash,
                    "grant": {"type": "AccessGrant", "expiresAt": "2099-01-01T00:00:00Z"},
                    "history": history,
                }
            )
        )
    return records


def _counts(stack: Stack, records: list[ChallengeRecord]) -> dict[tuple[int, str], int]:
    """What the tally of the servers that sold these would have added, per hour."""
    counts: Counter[tuple[int, str]] = Counter()
    settled = f"settled:hourly|{stack.chain.network}|{stack.chain.token.address}|{HOURLY_AMOUNT}"
    for record in records:
        hour = hour_of(record.updated_at)
        for name, n in (
            ("unpaid", 10),
            ("challenge:hourly", 2),
            ("tried:hourly", 1),
            (settled, 1),
            ("delivered:hourly", 1),
            ("settler:gas-wallet:settled", 1),
            ("settler:gas-wallet:ms", 25),
        ):
            counts[(hour, name)] += n
    return dict(counts)


async def _fill(stack: Stack, document: dict[str, Any], name: str, count: int) -> str:
    """Fill the store; the address of one payer (a search the bench asks for)."""
    directory = stack.directory / name
    directory.mkdir(parents=True, exist_ok=True)
    config = parse_config(document, base_dir=directory, env={GAS_KEY_ENV: _key(stack.gas_wallet)})
    now = time.time()
    records = _purchases(stack, count, now)
    async with opened(config) as pipeline:
        store = pipeline.store
        assert isinstance(store, PortableStore)
        for start in range(0, count, FILL_BATCH):
            chunk = records[start : start + FILL_BATCH]
            await store.import_items([ExportedChallenge(r) for r in chunk], now=now)
        counts = _counts(stack, records)
        keys = sorted(counts)
        for start in range(0, len(keys), FILL_BATCH):
            part = {key: counts[key] for key in keys[start : start + FILL_BATCH]}
            await pipeline.store.add_counts(part, forget_before=hour_of(now - 400 * 86_400))
    return str(records[-1].payer)


def _latencies(url: str, params: dict[str, str]) -> list[float]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx.Client(headers=headers, timeout=30) as client:
        for _ in range(WARMUP):
            client.get(url, params=params).raise_for_status()
        taken = []
        for _ in range(REQUESTS):
            started = time.perf_counter()
            answer = client.get(url, params=params)
            taken.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
    return taken


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(stack: Stack, count: int = PURCHASES) -> list[Row]:
    rows = []
    for store in stack.stores:
        port = free_port()
        document = stack.config(
            store=store,
            settlement="gas-wallet",
            admin={"token": ADMIN_TOKEN, "port": port},
            reconciler={"enabled": False},  # (its pass would read the 100k records meanwhile)
        )
        name = f"console-{store}"
        payer = asyncio.run(_fill(stack, document, name, count))
        server = stack.x402srv(document, name)
        try:
            admin = f"http://127.0.0.1:{port}/admin/api"
            month = str(time.time() - DAYS * 86_400)
            asks: list[tuple[str, str, dict[str, str]]] = [
                ("overview (7 days by day)", "/overview", {}),
                ("overview (30 days by day)", "/overview", {"from": month}),
                ("revenue (7 days by hour)", "/revenue", {"bucket": "hour"}),
                ("purchases, newest page", "/purchases", {}),
                ("purchases of one payer", "/purchases", {"q": payer}),
                ("grants, newest page", "/grants", {}),
            ]
            for label, path, params in asks:
                taken = _latencies(admin + path, params)
                p50, p95, p99 = (_percentile(taken, p) for p in (50, 95, 99))
                judged: tuple[Verdict, ...] = ()
                if path == "/overview" and not params:
                    judged = (verdict("p95 < 50 ms", p95 < 50, f"p95 {p95:.1f} ms"),)
                rows.append(
                    Row(
                        SECTION,
                        f"x402srv {store}: {label}",
                        f"p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  p99 {p99:6.1f} ms  "
                        f"(mean {statistics.fmean(taken):.1f}, {REQUESTS} requests)",
                        judged,
                    )
                )
        finally:
            stack.stop_server(server)
    return rows
