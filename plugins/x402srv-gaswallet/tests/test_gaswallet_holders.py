"""A nonce lease whose holder died on this host is taken over early, and only then.

The holders are real processes: a Python child that prints its holder id,
alive, killed before its parent reaps it (a zombie), or killed and reaped. A
holder id that names another host, boot or namespace, or a pid that now belongs
to another process, must never pass for a dead holder of ours: taking over from
a live holder would let two processes pick the same nonce.

The gate's tests move a frozen clock and count the gate's tries: none of them
depends on how fast this machine runs them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from x402srv_gaswallet import holders as holders_module
from x402srv_gaswallet.holders import ProcessKey, holder_id, is_dead_here
from x402srv_gaswallet.nonces import NonceGate

from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.interfaces import Clock, Lease, Store

pytestmark = pytest.mark.skipif(
    ProcessKey.of_this_process() is None, reason="no /proc that names this process"
)

NAME = "gas-wallet-nonce:1:0xwallet"
_PRINTS_ITS_HOLDER = (
    "import sys; from x402srv_gaswallet.holders import holder_id; "
    "print(holder_id(), flush=True); sys.stdin.read()"
)


class Holders:
    """Child processes that print their holder id and wait (killed at teardown)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self) -> tuple[subprocess.Popen[str], str]:
        child = subprocess.Popen(
            [sys.executable, "-c", _PRINTS_ITS_HOLDER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(child)
        assert child.stdout is not None
        return child, child.stdout.readline().strip()

    def dead(self) -> str:
        """The holder id of a process that died (killed and reaped)."""
        child, holder = self.start()
        child.kill()
        child.wait()
        return holder


@pytest.fixture
def holders() -> Iterator[Holders]:
    made = Holders()
    yield made
    for child in made.started:
        child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def _replace(holder: str, index: int, part: str) -> str:
    parts = holder.split(":")
    parts[index] = part
    return ":".join(parts)


def _key(holder: str) -> ProcessKey:
    key = ProcessKey.parse(holder.split(":")[3])
    assert key is not None
    return key


def test_a_live_holder_on_this_host_is_alive(holders: Holders) -> None:
    _, holder = holders.start()
    assert not is_dead_here(holder)
    assert not is_dead_here(holder_id())  # this process


def test_a_killed_holder_is_dead_even_before_it_is_reaped(holders: Holders) -> None:
    child, holder = holders.start()
    child.kill()
    deadline = time.monotonic() + 10
    while not is_dead_here(holder):  # a zombie until its parent reaps it
        assert time.monotonic() < deadline, "the killed child still looks alive"
        time.sleep(0.01)
    zombie = holders_module._stat(child.pid)  # (from /proc: poll() would reap it)
    assert zombie is not None and zombie[:2] == ("Z", _key(holder).started), zombie
    assert child.wait() == -9
    assert is_dead_here(holder)


def test_a_reused_pid_does_not_keep_a_dead_holder_alive(holders: Holders) -> None:
    """The pid is alive, but it started at another time: the holder itself is gone."""
    _, holder = holders.start()
    key = _key(holder)
    earlier = ProcessKey(key.boot, key.namespaces, key.started - 1)
    assert is_dead_here(_replace(holder, 3, str(earlier)))


def test_holders_it_cannot_check_count_as_alive(holders: Holders) -> None:
    """Another host, boot or container, or an id without a process key: wait the TTL."""
    dead = holders.dead()
    assert is_dead_here(dead)
    key = _key(dead)
    cannot_check = [
        _replace(dead, 0, "another-host"),
        _replace(dead, 3, str(ProcessKey("another-boot", key.namespaces, key.started))),
        _replace(dead, 3, str(ProcessKey(key.boot, "1-2", key.started))),  # another container
        ":".join(dead.split(":")[:3]),  # an older release's id: host, pid, random
        "doomed-host:1",
        "",
        _replace(dead, 1, "not-a-pid"),
        _replace(dead, 3, "garbled"),
    ]
    assert [h for h in cannot_check if is_dead_here(h)] == []


def test_a_live_holder_hidden_from_proc_is_alive(
    holders: Holders, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``/proc`` mounted ``hidepid=2`` (systemd's ``ProtectProc=invisible``) another
    user's live process has no ``/proc/<pid>``: it must not pass for a dead holder."""
    child, holder = holders.start()
    proc_stat = holders_module._stat

    def hidden(pid: int) -> tuple[str, int, int] | None:
        # A fake, because hidepid cannot be mounted here (it needs root and a /proc of
        # its own): the one thing it changes for us, a missing /proc/<pid>, is faked.
        if pid == child.pid:
            raise FileNotFoundError(f"/proc/{pid}/stat")
        return proc_stat(pid)

    monkeypatch.setattr(holders_module, "_stat", hidden)
    assert not is_dead_here(holder)
    child.kill()
    child.wait()
    assert is_dead_here(holder)  # the kernel says the pid is gone: hidden or not, dead


def test_an_unreadable_pid_namespace_takes_over_from_nobody(
    holders: Holders, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without our pid namespace, a holder in another container would compare equal to
    ours (its pids another pid namespace's): every holder then counts as alive, and our
    own id carries no process key, so nobody takes over from us either."""
    dead = holders.dead()
    assert is_dead_here(dead)
    # (a /proc without ns/ cannot be mounted here: the namespaces are read from an
    # empty directory instead)
    monkeypatch.setattr(holders_module, "_NAMESPACES", tmp_path)
    assert ProcessKey.of_this_process() is None
    assert not is_dead_here(dead)
    assert len(holder_id().split(":")) == 3  # host, pid, random: no key to vouch for


# ---------------------------------------------------------------- the gate


async def _no_transactions_yet() -> int:
    return 0  # the gate's pending count: these tests send nothing


#: The gate's RPC timeout: how old a dead holder's lease must be before it is taken over.
RPC_TIMEOUT = 5.0


class FrozenClock:
    """The gate's and the store's clock, moved only by the test (no test here sleeps on it)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountedStore(MemoryStore):
    """A memory store that counts the gate's tries to take the lease."""

    def __init__(self) -> None:
        super().__init__()
        self.tries = 0
        self._tried = asyncio.Event()

    async def acquire_lease(self, name: str, holder: str, ttl: float, now: float) -> Lease | None:
        self.tries += 1
        self._tried.set()
        return await super().acquire_lease(name, holder, ttl, now)

    async def tried_again(self, times: int = 2) -> None:
        """Return once the gate has tried ``times`` more times (each try's checks done)."""
        until = self.tries + times
        async with asyncio.timeout(10):
            while self.tries < until:
                self._tried.clear()
                await self._tried.wait()


def _gate(store: Store, ttl: float, clock: Clock = time.time) -> NonceGate:
    return NonceGate(
        store=store,
        chain_id=1,
        address="0xWallet",
        lease_seconds=ttl,
        rpc_timeout=RPC_TIMEOUT,
        clock=clock,
        pending_count=_no_transactions_yet,
    )


async def _entered(gate: NonceGate, bound: float) -> None:
    """Go through ``gate`` (TimeoutError past ``bound`` seconds: it never let us in)."""
    async with asyncio.timeout(bound), gate.hold() as ticket:
        assert ticket.nonce == 0


async def test_the_gate_takes_a_dead_holders_lease_over_at_once(holders: Holders) -> None:
    store = MemoryStore()
    ttl = 60.0  # waiting for it would outlast the bound below
    taken_at = time.time() - RPC_TIMEOUT  # any send of the dead holder's is over
    assert await store.acquire_lease(NAME, holders.dead(), ttl, taken_at) is not None
    gate = _gate(store, ttl)
    await _entered(gate, bound=ttl / 2)
    after = await store.acquire_lease(NAME, "probe", 1, time.time())
    assert after is not None and after.fence == 3  # the dead holder's 1, the gate's 2


async def test_a_dead_holders_lease_is_taken_over_only_once_its_send_is_over(
    holders: Holders,
) -> None:
    """A holder killed during ``eth_sendRawTransaction`` may have its request still in a
    socket buffer: it can reach the node after the process died, and a waiter reading
    the pending count before it would reuse the nonce. Its lease is taken over once it
    is the RPC timeout old (that send is over then), long before the TTL runs out."""
    clock, store = FrozenClock(), CountedStore()
    ttl = 60.0
    assert await store.acquire_lease(NAME, holders.dead(), ttl, clock()) is not None
    entering = asyncio.create_task(_entered(_gate(store, ttl, clock), bound=ttl))
    await store.tried_again()
    assert not entering.done()  # dead, but its last send may be on its way
    clock.advance(RPC_TIMEOUT - 0.1)
    await store.tried_again()
    assert not entering.done()
    clock.advance(0.1)
    await asyncio.wait_for(entering, 10)
    after = await store.acquire_lease(NAME, "probe", 1, clock())
    assert after is not None and after.fence == 3  # taken over 5 s in, 55 s before expiry


async def test_the_gate_waits_for_a_live_holders_lease_to_expire(holders: Holders) -> None:
    clock, store = FrozenClock(), CountedStore()
    ttl = 60.0
    _, live = holders.start()
    assert await store.acquire_lease(NAME, live, ttl, clock()) is not None
    entering = asyncio.create_task(_entered(_gate(store, ttl, clock), bound=ttl))
    await store.tried_again()
    clock.advance(ttl - 0.1)  # long past the RPC timeout: a live holder is never taken over
    await store.tried_again()
    assert not entering.done()
    clock.advance(0.1)
    await asyncio.wait_for(entering, 10)


class _LeasesOnly:
    """A store of a plugin written before ``LeaseTakeoverStore``: leases, no takeover."""

    name = "leases-only"

    def __init__(self, inner: CountedStore) -> None:
        self.inner = inner

    async def acquire_lease(self, *args: Any) -> Lease | None:
        return await self.inner.acquire_lease(*args)

    async def release_lease(self, *args: Any) -> bool:
        return await self.inner.release_lease(*args)


async def test_a_store_without_takeover_waits_the_ttl_even_for_a_dead_holder(
    holders: Holders,
) -> None:
    clock, store = FrozenClock(), CountedStore()
    ttl = 60.0
    assert await store.acquire_lease(NAME, holders.dead(), ttl, clock()) is not None
    # (only the lease methods: what NonceGate calls, as a third-party store has them)
    gate = _gate(cast(Store, _LeasesOnly(store)), ttl, clock)
    entering = asyncio.create_task(_entered(gate, bound=ttl))
    await store.tried_again()
    clock.advance(ttl - 0.1)  # dead, and long past the RPC timeout: it cannot take over
    await store.tried_again()
    assert not entering.done()
    clock.advance(0.1)
    await asyncio.wait_for(entering, 10)
