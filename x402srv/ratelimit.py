"""The unpaid-request limit: one client may ask for so many 402s per window (SPEC 4.4).

Every unpaid request costs the seller something (a stored challenge, a task, a
402 to build), and anyone can send them. Requests that carry a payment are
never counted or refused here: a paying buyer is never kept out.

Counting is shared by every worker and instance through the store
(``Store.count_hits``), in fixed windows, without a store round trip per
request: each process counts locally and adds its count to the store's when a
client is first seen in a window and then every ``sync_every`` requests, and
decides on the store's total plus what it has not sent yet. So N processes let
through at most N x ``sync_every`` requests more than the limit (5 % of it each),
and a client once over the limit is refused locally until the window ends.

A store that cannot be reached leaves each process counting on its own (and
adding its count to the store's once it is back): the limit still holds per
process, and a store outage never refuses a client that is under it.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import RateLimited, StoreUnavailable
from .interfaces import Clock, Store

if TYPE_CHECKING:
    from sanic import Request

__all__ = ["LimitOptions", "UnpaidLimiter", "client_key", "client_of"]

log = logging.getLogger("x402srv.ratelimit")

#: Clients remembered per window in one process; past this the local counts are
#: dropped and re-read from the store (correct, just one round trip more each).
MAX_CLIENTS = 100_000


@dataclass(frozen=True, slots=True)
class LimitOptions:
    requests: int
    window_seconds: float


def client_key(remote_ip: str | None, forwarded: str | None = None) -> str | None:
    """Who a request counts against: the first hop of a trusted proxy header, else the peer.

    IPv6 clients are counted per /64, the block one subscriber usually holds:
    counting single addresses would let one host rotate through 2^64 of them.
    """
    candidate = (forwarded or "").split(",", 1)[0].strip() or (remote_ip or "").strip()
    if not candidate:
        return None
    try:
        address = ipaddress.ip_address(candidate.strip("[]"))
    except ValueError:
        return candidate[:64]  # not an address (a unix socket path): count it as given
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def client_of(request: Request[Any, Any]) -> str | None:
    """The key an HTTP request counts under, per ``[rate_limit] client_ip_header``."""
    header = request.app.ctx.config.rate_limit.client_ip_header
    return client_key(request.ip, request.headers.get(header) if header else None)


class UnpaidLimiter:
    def __init__(self, store: Store, options: LimitOptions, clock: Clock) -> None:
        self.store = store
        self.limit = options.requests
        self.window = options.window_seconds
        self.sync_every = max(1, options.requests // 20)
        self.clock = clock
        self._index = -1
        self._pending: dict[str, int] = {}  # counted here, not yet added to the store
        self._known: dict[str, int] = {}  # the store's total as last read

    async def check(self, client: str) -> None:
        """Count one unpaid request of ``client``; raise ``RateLimited`` past the limit."""
        now = self.clock()
        index = int(now // self.window)
        if index != self._index or len(self._known) > MAX_CLIENTS:
            self._index, self._pending, self._known = index, {}, {}
        pending = self._pending.get(client, 0) + 1
        self._pending[client] = pending
        known = self._known.get(client)
        if known is None or (pending >= self.sync_every and known <= self.limit):
            known = await self._sync(client, index, now)
        if known + self._pending.get(client, 0) > self.limit:
            raise RateLimited(
                f"more than {self.limit} unpaid requests in {self.window:g} s from this client; "
                "requests that carry a payment are never limited",
                retry_after=math.ceil((index + 1) * self.window - now),
            )

    async def _sync(self, client: str, index: int, now: float) -> int:
        delta = self._pending.pop(client, 0)
        key = f"unpaid:{client}:{index}"
        try:
            totals = await self.store.count_hits(
                {key: delta}, window_end=(index + 1) * self.window, now=now
            )
        except StoreUnavailable:
            log.warning("unpaid-request limit: the store is unavailable; counting locally")
            if index == self._index:
                self._pending[client] = self._pending.get(client, 0) + delta
            return self._known.get(client, 0)
        total = totals.get(key, delta)
        if index == self._index:
            self._known[client] = total
        return total
