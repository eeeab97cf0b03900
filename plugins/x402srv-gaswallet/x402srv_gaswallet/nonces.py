"""Who may pick the gas wallet's next nonce, and which one.

Two transactions of one wallet with the same nonce do not both land: the second
is refused or, worse, *replaces* the first in the mempool. So picking a nonce
and broadcasting with it happen under a gate:

- within one process an ``asyncio.Lock``;
- across processes (several workers on one sqlite file, several hosts on a
  shared store) the store's lease ``gas-wallet-nonce:<chainId>:<address>``.

A holder that crashed leaves the lease held. When its holder id names a
process of this host that is gone (``holders``: pid, start time, boot and
namespaces, so a reused pid or another container never passes for it) and the
store can hand a held lease on (``LeaseTakeoverStore``), the next waiter takes
it over as soon as the lease is ``rpc_timeout`` old, a compare-and-set on holder
and fence so one waiter wins. Otherwise (a holder on another host, a store
without the capability) the lease passes on when its TTL runs out.

The nonce is ``max(value left by the previous holder, eth_getTransactionCount
(pending))``. The chain is always asked; the left value only helps when the
node behind a load balancer has not seen the previous holder's transaction yet.
It is trusted for ``LEFT_NONCE_TRUST_SECONDS`` only: if a transaction was
dropped from the mempool, a left value would point past a gap forever, while the
chain's count lets the next transaction fill it.

Why wait ``rpc_timeout``: a holder killed during ``eth_sendRawTransaction`` may
leave its request in a socket buffer, to reach the node after the process died.
A waiter that read the pending count before it arrived would pick the same
nonce (its transaction refused or replacing the other: no funds lost, but a
buyer may go unserved). A send is over, one way or the other, once its RPC
timeout has passed, and the holder's first send began after it took the lease
(taken at ``expires_at - ttl``: every process of a wallet runs with the same
``nonce_lease_seconds``). After that the pending count includes whatever the
dead holder sent. The gate is never held while waiting for a receipt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from x402srv.plugin import Clock, Lease, LeaseTakeoverStore, Store

from .holders import holder_id, is_dead_here

__all__ = ["LEFT_NONCE_TRUST_SECONDS", "NonceGate", "NonceTicket", "NonceUnavailable"]

log = logging.getLogger("x402srv_gaswallet.nonces")

LEFT_NONCE_TRUST_SECONDS = 60.0
_BACKOFF_FIRST = 0.01
_BACKOFF_MAX = 0.25


class NonceUnavailable(Exception):
    """The gate could not be entered (busy past its bound, store or node down).

    Raised only before the ticket is handed out, so nothing was sent.
    """


@dataclass(slots=True)
class NonceTicket:
    """The nonce to use now; the settler marks it ``sent`` once the node accepted it."""

    nonce: int
    sent: bool = False


class NonceGate:
    """Serialises nonce choice and broadcast for one wallet on one chain."""

    def __init__(
        self,
        *,
        store: Store | None,
        chain_id: int,
        address: str,
        lease_seconds: float,
        rpc_timeout: float,
        clock: Clock,
        pending_count: Callable[[], Awaitable[int]],
    ) -> None:
        self.lease_name = f"gas-wallet-nonce:{chain_id}:{address.lower()}"
        self._holder = (os.getpid(), holder_id())
        self._store = store
        self._takeover = store if isinstance(store, LeaseTakeoverStore) else None
        self._ttl = lease_seconds
        # A dead holder's send may still reach the node until its RPC timeout passed.
        self._rpc_timeout = rpc_timeout
        # A crashed holder on another host blocks for one TTL; a second covers a live queue.
        self._wait = 2 * lease_seconds
        self._clock = clock
        self._pending_count = pending_count
        self._lock = asyncio.Lock()

    @property
    def holder(self) -> str:
        """This process's holder id (a new one after a fork: the pid is part of it)."""
        if self._holder[0] != os.getpid():
            self._holder = (os.getpid(), holder_id())
        return self._holder[1]

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[NonceTicket]:
        """Enter the gate and get a ticket; leaving it hands the next nonce on.

        Raises ``NonceUnavailable`` when the gate stays closed longer than two lease
        TTLs, or the store or the node cannot tell the next nonce.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait
        try:
            async with asyncio.timeout_at(deadline):
                await self._lock.acquire()
        except TimeoutError:
            raise NonceUnavailable("the gas wallet's local nonce lock stayed busy") from None
        try:
            lease = await self._acquire_lease(deadline)
            ticket: NonceTicket | None = None
            try:
                try:
                    chain_next = await self._pending_count()
                except Exception as exc:
                    raise NonceUnavailable(
                        f"pending nonce unreadable ({type(exc).__name__})"
                    ) from None
                ticket = NonceTicket(max(chain_next, self._left_nonce(lease)))
                yield ticket
            finally:
                await self._release_lease(lease, ticket)
        finally:
            self._lock.release()

    async def resync(self, ticket: NonceTicket) -> None:
        """After "nonce too low": the chain moved past ``ticket.nonce`` (someone else sent)."""
        ticket.nonce = max(ticket.nonce + 1, await self._pending_count())

    async def pending_count(self) -> int:
        """The node's next nonce for the wallet, pending transactions included."""
        return await self._pending_count()

    async def _acquire_lease(self, deadline: float) -> Lease | None:
        if self._store is None:
            return None
        loop = asyncio.get_running_loop()
        pause = _BACKOFF_FIRST
        while True:
            lease = await _from_store(
                self._store.acquire_lease(self.lease_name, self.holder, self._ttl, self._clock())
            )
            if lease is None:
                lease = await self._take_over_from_the_dead()
            if lease is not None:
                return lease
            if loop.time() + pause > deadline:
                raise NonceUnavailable("the gas wallet's nonce lease stayed taken")
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, _BACKOFF_MAX)

    async def _take_over_from_the_dead(self) -> Lease | None:
        """The lease, if its holder is a process of this host that has died (else None).

        Only once the lease is ``rpc_timeout`` old: a send the holder began before
        it died is over by then (see the module docstring).
        """
        store = self._takeover
        if store is None:
            return None
        held = await _from_store(store.held_lease(self.lease_name, self._clock()))
        if held is None or held.holder == self.holder:
            return None
        taken_at = held.expires_at - self._ttl
        if self._clock() - taken_at < self._rpc_timeout or not is_dead_here(held.holder):
            return None
        lease = await _from_store(
            store.take_over_lease(held, self.holder, self._ttl, self._clock())
        )
        if lease is not None:  # (None: another waiter took it first, or it moved)
            log.info(
                "gas-wallet nonce lease %s taken over from %s, a process of this host "
                "that died holding it",
                self.lease_name,
                held.holder,
            )
        return lease

    async def _release_lease(self, lease: Lease | None, ticket: NonceTicket | None) -> None:
        if lease is None or self._store is None:
            return
        value = None
        if ticket is not None and ticket.sent:
            value = json.dumps({"next_nonce": ticket.nonce + 1, "at": self._clock()})
        # ``None`` leaves nothing new: the next holder trusts the chain's count, which
        # is right whether an ambiguous send landed or not.
        try:
            released = await self._store.release_lease(lease, value)
        except Exception as exc:
            # The transaction (if any) is out; the lease simply expires after its TTL.
            log.warning(
                "gas-wallet nonce lease %s not released (%s); it expires in %.0f s",
                self.lease_name,
                type(exc).__name__,
                self._ttl,
            )
            return
        if not released:
            log.warning(
                "gas-wallet nonce lease %s ran out while held; the next holder resyncs "
                "from the chain (raise nonce_lease_seconds if this repeats)",
                self.lease_name,
            )

    def _left_nonce(self, lease: Lease | None) -> int:
        if lease is None or not lease.value:
            return 0
        try:
            left = json.loads(lease.value)
            nonce, at = int(left["next_nonce"]), float(left["at"])
        except (ValueError, KeyError, TypeError):
            return 0
        if self._clock() - at > LEFT_NONCE_TRUST_SECONDS:
            return 0
        return nonce


async def _from_store(call: Awaitable[Lease | None]) -> Lease | None:
    """A lease call's answer; any failure of the store is ``NonceUnavailable``."""
    try:
        return await call
    except Exception as exc:
        raise NonceUnavailable(f"store unavailable ({type(exc).__name__})") from None
