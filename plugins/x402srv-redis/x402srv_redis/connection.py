"""The Redis client and the boundary where Redis errors become ``StoreUnavailable``.

One ``redis.asyncio`` client per worker process over a blocking connection
pool: a request that finds every connection busy waits ``pool_timeout_seconds``
for one, then fails like any other outage.

redis-py retries nothing here. A command that failed mid-way may have run on
the server, and re-running a compare-and-set blindly could report a lost race
for the caller's own write; the pipeline re-reads the record on the next
request instead. Connections that died with a restarted server are replaced
when the pool hands them out (redis-py checks them), so service resumes by
itself once Redis answers again (``test_a_restart_is_an_outage_that_ends_by_itself``
checks that the first command after a restart already succeeds).

Nothing that reaches a client or a log line holds the URL's password: logs get
``redact_url`` (scheme, host, port) and the exception's type, plus the server's
own reply for ``ResponseError`` (``OOM ...``, ``LOADING ...``, ``READONLY ...``),
which never echoes credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from x402srv.plugin import ConfigError, Secret, StoreUnavailable, redact_url

from .options import RedisOptions
from .replicas import ReplicasBehind
from .sentinel import SCHEME, parse_sentinel_url, sentinel_client

__all__ = [
    "RETRY_AFTER",
    "UNAVAILABLE",
    "client_for",
    "converted",
    "describe",
    "display_url",
    "is_auth_failure",
    "unavailable",
]

log = logging.getLogger("x402srv_redis")

#: Seconds a client is told to wait: a restart or failover takes a few.
RETRY_AFTER = 2
UNAVAILABLE = "The store could not be reached; retry later."

_AUTH_REPLIES = ("NOAUTH", "WRONGPASS", "INVALID PASSWORD", "NOPERM")


def client_for(url: Secret, options: RedisOptions) -> tuple[Redis, list[Redis]]:
    """A client for ``url``, and the Sentinel clients to close with it (``sentinel``).

    Connects lazily, so building it never fails on a down server.
    """
    text = url.reveal()
    kwargs: dict[str, Any] = {
        "max_connections": options.max_connections,
        "timeout": options.pool_timeout_seconds,
        "socket_timeout": options.socket_timeout_seconds,
        "socket_connect_timeout": options.connect_timeout_seconds,
        "decode_responses": True,
        "retry": Retry(NoBackoff(), 0),
        "client_name": "x402srv",
        **_without_maintenance_notifications(),
    }
    if text.partition("://")[0].lower() == SCHEME:
        return sentinel_client(parse_sentinel_url(text), kwargs)
    if options.tls_ca_file is not None:
        kwargs["ssl_ca_certs"] = str(options.tls_ca_file)
    try:
        pool = BlockingConnectionPool.from_url(text, **kwargs)
    except ValueError:
        # redis-py's message may quote the URL.
        raise ConfigError(
            "is not a Redis URL redis-py accepts (value not shown)", path="store.url"
        ) from None
    return Redis.from_pool(pool), []


def display_url(url: Secret) -> str:
    """The URL as logs show it: scheme, host(s) and port(s), never credentials."""
    text = url.reveal()
    if text.partition("://")[0].lower() == SCHEME:
        try:
            return parse_sentinel_url(text).display()
        except ConfigError:
            return f"{SCHEME}://<redacted>"
    return redact_url(text)


def _without_maintenance_notifications() -> dict[str, Any]:
    """Turn redis-py's maintenance notifications off (they exist from redis-py 7).

    While they are on ("auto", the default) the pool skips its check of idle
    connections, and every pooled connection that died with a restarted server
    fails one request before it is replaced.
    """
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # older redis-py: no notifications, nothing skipped
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def is_auth_failure(exc: BaseException) -> bool:
    """Wrong or missing credentials: the seller's config, not an outage."""
    if isinstance(exc, AuthenticationError):
        return True
    return isinstance(exc, ResponseError) and str(exc).upper().startswith(_AUTH_REPLIES)


#: What uvloop raises for a write on a connection the server closed meanwhile (a Redis
#: stopping while redis-py sends a command on a socket it just opened): an outage too.
_CLOSED_TRANSPORT = "unable to perform operation on <"


@contextmanager
def converted(op: str, url: Secret) -> Iterator[None]:
    """Redis and socket errors inside become ``StoreUnavailable`` (503, Retry-After)."""
    try:
        yield
    except (RedisError, OSError) as exc:
        log.error("redis store %s: %s failed: %s", display_url(url), op, describe(exc))
        raise unavailable() from None
    except RuntimeError as exc:
        if not str(exc).startswith(_CLOSED_TRANSPORT):
            raise
        log.error("redis store %s: %s failed: the connection closed", display_url(url), op)
        raise unavailable() from None


def unavailable() -> StoreUnavailable:
    """The 503 every outage becomes; chained to nothing, so no Redis error rides along."""
    error = StoreUnavailable(UNAVAILABLE, retry_after=RETRY_AFTER)
    error.__suppress_context__ = True
    return error


def describe(exc: BaseException) -> str:
    """The exception's type; for a server reply also its first words (never credentials)."""
    if isinstance(exc, ReplicasBehind) or (
        isinstance(exc, ResponseError) and not is_auth_failure(exc)
    ):
        return f"{type(exc).__name__}: {str(exc)[:160]}"
    return type(exc).__name__
