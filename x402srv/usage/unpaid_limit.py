"""The unpaid-request limit: one client may ask for so many 402s per window (docs/errors.md).

Every unpaid request costs the seller something (a stored challenge, a task, a
402 to build), and anyone can send them. A payment that verifies is never
counted or refused: a paying buyer is never kept out. A payment that fails
(a made-up signature costs an ecrecover and a store read) counts as one unpaid
request, and past the limit its answer is the 429 instead of the 402.

Who the client is (``client_of``): the peer address of the connection, or,
behind proxies (``[rate_limit] client_ip_header`` with ``trusted_hops = N``),
the N-th address from the right of that header: the one the outermost of the N
proxies wrote, never a value the client wrote itself (a proxy appends to what
the client sent, so only the right-most N entries are the proxies'). A header
with fewer than N entries did not pass through all N proxies, so none of its
entries can be trusted: the peer address counts then (as werkzeug's
``ProxyFix`` and Sanic's ``PROXIES_COUNT`` do). See docs/operations.md.

Counting is shared by every worker and instance through the store
(``Store.count_hits``), in fixed windows, without a store round trip per
request: each process counts locally and adds its count to the store's when a
client is first seen in a window and then every ``sync_every`` requests, and
decides each request on the store's total plus its own requests not yet in it.
A request that would be decided on a total more than ``sync_every`` of its own
requests old waits for a fresh one, however many arrive at once. So each
process admits fewer than ``sync_every`` requests the others have not heard of,
N processes let through fewer than (N - 1) x ``sync_every`` requests more than
the limit (5 % of it each), one process exactly the limit, and a client once
over the limit is refused locally until the window ends.

A store that cannot be reached leaves each process counting on its own (and
adding its count to the store's once it is back): the limit still holds per
process, and a store outage never refuses a client that is under it.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from x402srv.errors import RateLimited, StoreUnavailable
from x402srv.interfaces import Clock, Store
from x402srv.server.tasks import detached

if TYPE_CHECKING:
    from sanic import Request

__all__ = ["LimitOptions", "UnpaidLimiter", "client_key", "client_of", "forwarded_hop"]

log = logging.getLogger("x402srv.usage.unpaid_limit")

#: Clients remembered per window in one process; past this the local counts are
#: dropped and re-read from the store (correct, just one round trip more each).
MAX_CLIENTS = 100_000
#: Addresses up to this long have their keys remembered (the longest IPv6 form with a port is 55).
_REMEMBERED_CHARS = 64


@dataclass(frozen=True, slots=True)
class LimitOptions:
    requests: int
    window_seconds: float


def forwarded_hop(values: Iterable[str], trusted_hops: int) -> str | None:
    """The ``trusted_hops``-th address from the right of a proxy header, or None.

    ``values`` are the header's lines in the order received (several lines are
    one comma-separated list). Empty entries are skipped; an RFC 7239
    ``Forwarded`` element counts by its ``for=`` parameter. None when the
    header has fewer entries than ``trusted_hops``: the caller counts the peer.
    """
    hops = [hop.strip() for value in values for hop in value.split(",")]
    hops = [hop for hop in hops if hop]
    if len(hops) < trusted_hops:
        return None
    hop = hops[-trusted_hops]
    if "=" in hop:  # a Forwarded element: for=192.0.2.1;proto=https
        params = (param.strip().partition("=") for param in hop.split(";"))
        hop = next((value for name, _, value in params if name.lower() == "for"), hop)
    return hop.strip().strip('"')


def client_key(address: str | None) -> str | None:
    """The key a client address counts under.

    IPv6 clients are counted per /64, the block one subscriber usually holds:
    counting single addresses would let one host rotate through 2^64 of them.
    A port a proxy wrote (``192.0.2.1:5555``, ``[2001:db8::1]:443``) is dropped,
    or rotating source ports would rotate keys. Remembered per address: every
    unpaid request asks, mostly for addresses seen a moment ago, and parsing
    one was most of the cost of counting a request.
    """
    if not address:
        return None
    if len(address) <= _REMEMBERED_CHARS:  # any address with a port; never a long header value
        return _remembered_key(address)
    return _key(address)


@functools.lru_cache(maxsize=4096)
def _remembered_key(address: str) -> str | None:
    return _key(address)


def _key(address: str) -> str | None:
    candidate = address.strip()
    if not candidate:
        return None
    host = candidate
    if host.startswith("["):  # [v6] or [v6]:port
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # v4:port
        host = host.partition(":")[0]
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return candidate[:64]  # not an address (a unix socket path, "unknown"): as given
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def client_of(request: Request[Any, Any]) -> str | None:
    """The key an HTTP request counts under, per ``[rate_limit]`` (the module docstring)."""
    limits = request.app.ctx.config.rate_limit
    header, hops = limits.client_ip_header, limits.trusted_hops
    if header is None or hops is None:
        return client_key(request.ip)
    return client_key(forwarded_hop(request.headers.getall(header, []), hops) or request.ip)


@dataclass(slots=True)
class _Client:
    """What one process knows of one client's count in the current window."""

    counted: int = 0  # this client's requests counted here
    read_back: int = 0  # of those, how many are in ``total``
    total: int | None = None  # the store's total as last read
    sync: asyncio.Task[bool] | None = None  # the count on its way (False: it failed)


class UnpaidLimiter:
    """Counts unpaid requests per client and window; see the module docstring.

    Each request is decided on its place in the window: the other processes'
    requests in the store's total as last read, plus its own number among this
    process's requests. A request more than ``sync_every`` of this process's
    requests past what was last read back waits for a fresher total (the count
    on its way, or one it sends itself), so however many requests of one
    client arrive at once, this process admits fewer than ``sync_every`` that
    the others do not know of, and one count per client is on its way at a time.
    """

    def __init__(self, store: Store, options: LimitOptions, clock: Clock) -> None:
        self.store = store
        self.limit = options.requests
        self.window = options.window_seconds
        self.sync_every = max(1, options.requests // 20)
        self.clock = clock
        self._index = -1
        self._clients: dict[str, _Client] = {}

    async def check(self, client: str) -> None:
        """Count one unpaid request of ``client``; raise ``RateLimited`` past the limit."""
        now = self.clock()
        index = int(now // self.window)
        if index != self._index or len(self._clients) > MAX_CLIENTS:
            self._index, self._clients = index, {}
        count = self._clients.get(client)
        if count is None:
            count = self._clients[client] = _Client()
        count.counted += 1
        number = count.counted
        while self._needs_total(count, number):
            if count.sync is None:
                count.sync = detached(self._sync(count, f"unpaid:{client}:{index}", index, now))
            # (shielded: a request that leaves never drops the count of the others)
            if not await asyncio.shield(count.sync):
                # The store is down: decide on what is here, as every request waiting
                # on that count does (one sending its own would keep the others waiting).
                break
        if self._place(count, number) > self.limit:
            raise RateLimited(
                f"more than {self.limit} unpaid requests in {self.window:g} s from this client "
                "(a payment that fails counts as one); a payment that verifies is never limited",
                retry_after=math.ceil((index + 1) * self.window - now),
            )

    @staticmethod
    def _place(count: _Client, number: int) -> int:
        """Request ``number``'s place in the window: the others' requests as read, plus its own."""
        return (count.total or 0) - count.read_back + number

    def _needs_total(self, count: _Client, number: int) -> bool:
        """Whether request ``number`` must wait for a fresher total before it is decided.

        Once the store's total is past the limit, never: every request is refused
        here until the window ends, without a store round trip.
        """
        if count.total is None:
            return True
        return number - count.read_back >= self.sync_every and count.total <= self.limit

    async def _sync(self, count: _Client, key: str, index: int, now: float) -> bool:
        """Send the requests counted since the last count to the store; read its total back.

        False when the store is unavailable (the requests are sent with the next count).
        """
        delta = count.counted - count.read_back
        try:
            totals = await self.store.count_hits(
                {key: delta}, window_end=(index + 1) * self.window, now=now
            )
        except StoreUnavailable:
            log.warning("unpaid-request limit: the store is unavailable; counting locally")
            return False
        finally:
            count.sync = None
        count.read_back += delta
        # (the store's total only grows within a window)
        count.total = max(count.total or 0, totals.get(key, delta))
        return True
