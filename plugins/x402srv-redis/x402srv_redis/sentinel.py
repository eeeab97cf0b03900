"""``redis+sentinel://`` URLs: find the primary through Redis Sentinel, follow its failovers.

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]
                     [?sentinel_username=...&sentinel_password=...]

The hosts are Sentinels (port 26379 when left out), ``service`` the name
they monitor the primary under (``sentinel monitor <service> ...``), ``db``
the database number (0). The user and password are those of the Redis
servers (primary and replicas: they must share them); a Sentinel protected
by its own ``requirepass`` takes ``sentinel_password`` (and
``sentinel_username`` for an ACL user). The whole URL is the ``[store] url``
secret, so every password in it stays out of logs and ``x402srv check``.
TLS to Sentinels is not supported.

redis-py's Sentinel support does the following: a new connection asks the
Sentinels for the primary's address; a connection to a primary that was
demoted meanwhile gets ``READONLY`` on its next write, which redis-py turns
into a connection error (503 here) and a fresh look-up on the next
connection. The pool is the same blocking pool as for a plain URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

from x402srv.plugin import ConfigError

__all__ = ["SCHEME", "SentinelUrl", "parse_sentinel_url", "sentinel_client"]

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
_HOST = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>\d{1,5}))?$")
_QUERY_KEYS = {"sentinel_username", "sentinel_password"}


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def display(self) -> str:
        """What logs show: the Sentinels' addresses, nothing of the credentials or the rest."""
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.sentinels)
        return f"{SCHEME}://{hosts}/<redacted>"


def _bad(why: str) -> ConfigError:
    return ConfigError(f"{why} (value not shown)", path="store.url")


def parse_sentinel_url(text: str) -> SentinelUrl:
    """The parts of a ``redis+sentinel://`` URL; ``ConfigError`` on ``store.url`` if malformed."""
    scheme, _, rest = text.partition("://")
    if scheme.lower() != SCHEME:
        raise _bad(f"is not a {SCHEME}:// URL")
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, at, hostlist = authority.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = []
    for item in hostlist.split(","):
        match = _HOST.match(item.strip())
        if match is None or not 0 < int(match["port"] or DEFAULT_PORT) < 65536:
            raise _bad("lists a Sentinel that is not host[:port]")
        sentinels.append((match["v6"] or match["name"], int(match["port"] or DEFAULT_PORT)))
    service, _, db = path.strip("/").partition("/")
    if not service or (db and not db.isdigit()) or "/" in db:
        raise _bad("must name the monitored service: redis+sentinel://host:port/service[/db]")
    options = parse_qs(query, keep_blank_values=True)
    if set(options) - _QUERY_KEYS or any(len(v) != 1 for v in options.values()):
        raise _bad(f"takes only {' and '.join(sorted(_QUERY_KEYS))} as query parameters")
    return SentinelUrl(
        sentinels=tuple(sentinels),
        service=unquote(service),
        db=int(db or 0),
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username", [None])[0],
        sentinel_password=options.get("sentinel_password", [None])[0],
    )


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's primary look-up, with the blocking pool's wait for a free connection."""


def sentinel_client(address: SentinelUrl, kwargs: dict[str, Any]) -> tuple[Redis, list[Redis]]:
    """A client of the primary, and the Sentinel clients to close with it.

    ``kwargs`` are those of a plain URL's pool (timeouts, pool size, no retries).
    """
    pool_kwargs = dict(kwargs)
    pool_timeout = pool_kwargs.pop("timeout")
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": kwargs["socket_timeout"],
        "socket_connect_timeout": kwargs["socket_connect_timeout"],
        "decode_responses": True,
        "username": address.sentinel_username,
        "password": address.sentinel_password,
    }
    if "maint_notifications_config" in kwargs:
        sentinel_kwargs["maint_notifications_config"] = kwargs["maint_notifications_config"]
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # (redis-py leaves it untyped)
        list(address.sentinels), sentinel_kwargs=sentinel_kwargs
    )
    client = sentinel.master_for(
        address.service,
        connection_pool_class=BlockingSentinelPool,
        timeout=pool_timeout,
        db=address.db,
        username=address.username,
        password=address.password,
        **pool_kwargs,
    )
    return client, list(sentinel.sentinels)
