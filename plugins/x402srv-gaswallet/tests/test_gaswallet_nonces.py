"""Nonce safety across settler instances, crashed lease holders and outside senders."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from eth_account.signers.local import LocalAccount
from x402srv_gaswallet.testing import PRICE, RecordingHooks, SettlerRig, tx_nonce

from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv.devchain import Devchain
from x402srv.interfaces import Settled
from x402srv.settlement.chain import ChainReader


@pytest.fixture
async def sqlite_stores(tmp_path: Path) -> AsyncIterator[list[SqliteStore]]:
    """Two stores on one file, as two worker processes of one server would have."""
    stores = [SqliteStore(tmp_path / "x402srv.db") for _ in range(2)]
    for store in stores:
        await store.start()
    yield stores
    for store in stores:
        await store.close()


def _lease_name(rig: SettlerRig) -> str:
    return f"gas-wallet-nonce:{rig.devchain.chain_id}:{rig.gas_account.address.lower()}"


def _resyncs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "resyncing" in r.getMessage()]


async def test_two_settlers_sharing_a_sqlite_store_never_collide(
    rig: SettlerRig, sqlite_stores: list[SqliteStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Each settler has its own asyncio lock, as separate processes would; only the
    store's lease keeps them apart, and it does: no nonce is ever refused."""
    first, second = [await rig.start(store=store) for store in sqlite_stores]
    requests = [rig.request(rig.devchain.new_account(eth=0), challenge=f"c{i}") for i in range(20)]
    caplog.set_level(logging.INFO)

    outcomes = await asyncio.gather(
        *(
            (first if i % 2 else second).settle(request, rig.hooks())
            for i, request in enumerate(requests)
        )
    )

    assert all(isinstance(o, Settled) for o in outcomes), outcomes
    hashes = [o.tx_hash for o in outcomes if isinstance(o, Settled)]
    assert sorted(tx_nonce(rig.devchain, h) for h in hashes) == list(range(20))
    assert rig.received() == 20 * PRICE
    assert _resyncs(caplog) == []
    # The last holder left the next nonce in the lease for whoever comes next.
    probe = await sqlite_stores[0].acquire_lease(_lease_name(rig), "probe", 1, time.time())
    assert probe is not None and probe.value is not None
    assert json.loads(probe.value)["next_nonce"] == 20
    await sqlite_stores[0].release_lease(probe, None)


async def test_a_lease_left_by_a_crashed_holder_elsewhere_delays_at_most_its_ttl(
    rig: SettlerRig, sqlite_stores: list[SqliteStore]
) -> None:
    """A holder id this host cannot check (another host's, an older release's) is
    waited for until the lease expires: it may still be sending.

    The lease is 2 s with a second over it for the settlement: with 1 s and half a
    second over, the gate's back-off (up to 0.25 s past the expiry) and the settlement
    took 0.05-0.2 s of the half second on a machine with one core busy.
    """
    ttl = 2.0
    options = {
        "poll_interval_seconds": 0.05,
        "nonce_lease_seconds": ttl,
        "rpc_timeout_seconds": 0.5,
    }
    settler = await rig.start(store=sqlite_stores[0], options=options)
    request = rig.request()
    # Another host's worker took the lease and died before releasing it. (Timed from
    # before it was taken: a stall between the two does not shorten the wait seen.)
    started = time.monotonic()
    crashed = await sqlite_stores[1].acquire_lease(
        _lease_name(rig), "other-host:4242:crashed", ttl, time.time()
    )
    assert crashed is not None

    outcome = await settler.settle(request, rig.hooks())
    waited = time.monotonic() - started

    assert isinstance(outcome, Settled), outcome
    assert 0.5 * ttl < waited < ttl + 1.0
    assert tx_nonce(rig.devchain, outcome.tx_hash) == 0


_HOLDS_THE_LEASE = """
import asyncio, sys, time
from pathlib import Path
from x402srv.default_plugins.sqlite.store import SqliteStore
from x402srv_gaswallet.holders import holder_id

async def main():
    store = SqliteStore(Path(sys.argv[1]))
    await store.start()
    lease = await store.acquire_lease(sys.argv[2], holder_id(), float(sys.argv[3]), time.time())
    print("held" if lease else "busy", flush=True)
    await asyncio.sleep(3600)  # killed here, never releases

asyncio.run(main())
"""


async def test_a_lease_left_by_a_worker_killed_on_this_host_is_taken_over_at_once(
    rig: SettlerRig, sqlite_stores: list[SqliteStore], tmp_path: Path
) -> None:
    """A worker of this host killed while it held the lease (after broadcasting, say)
    no longer holds up the next payment: the settler sees the process is gone and
    takes the lease over, with the nonce from the chain's pending count."""
    ttl = 30.0  # waiting for it would outlast the bound below
    options = {"poll_interval_seconds": 0.05, "nonce_lease_seconds": ttl}
    settler = await rig.start(store=sqlite_stores[0], options=options)
    worker = subprocess.Popen(
        [sys.executable, "-c", _HOLDS_THE_LEASE, str(tmp_path / "x402srv.db"),
         _lease_name(rig), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "held"
    finally:
        worker.kill()
        worker.wait()
        if worker.stdout is not None:
            worker.stdout.close()

    async with asyncio.timeout(ttl / 2):
        outcome = await settler.settle(rig.request(), rig.hooks())

    assert isinstance(outcome, Settled), outcome
    assert tx_nonce(rig.devchain, outcome.tx_hash) == 0
    after = await sqlite_stores[1].acquire_lease(_lease_name(rig), "probe", 1, time.time())
    assert after is not None
    assert after.fence == 3  # the killed worker's 1, the settler's 2


class _OutsiderSendsFirst(RecordingHooks):
    """Someone outside the gate (a wallet shared with another tool) spends the nonce
    the settler just picked, between signing and sending."""

    def __init__(self, chain: ChainReader, devchain: Devchain, wallet: LocalAccount) -> None:
        super().__init__(chain)
        self.devchain = devchain
        self.wallet = wallet

    async def note_broadcast(self, tx_hash: str) -> None:
        await super().note_broadcast(tx_hash)
        if len(self.noted) == 1:
            self.devchain.rpc.send_transaction(self.wallet, to=self.wallet.address, value=1)


async def test_a_nonce_taken_from_outside_is_resynced_and_sent_again(
    rig: SettlerRig, caplog: pytest.LogCaptureFixture
) -> None:
    settler = await rig.start()
    hooks = _OutsiderSendsFirst(rig.chain, rig.devchain, rig.gas_account)

    outcome = await settler.settle(rig.request(), hooks)

    assert isinstance(outcome, Settled), outcome
    assert len(hooks.noted) == 2 and hooks.noted[-1] == outcome.tx_hash
    assert tx_nonce(rig.devchain, outcome.tx_hash) == 1
    assert rig.gas_nonce("latest") == 2
    assert len(_resyncs(caplog)) == 1
