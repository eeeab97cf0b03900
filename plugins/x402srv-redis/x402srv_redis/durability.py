"""What the Redis server's persistence keeps of an acknowledged write, read at start-up.

A payment claim the store acknowledged is what lets the pipeline send the
payment on-chain; if a crash then forgets it, the buyer may have paid for a
record that no longer exists. How much a crash can forget depends on the
server, not on x402srv (``docs/redis.md`` has the table):

- ``appendonly no`` (RDB snapshots, or nothing): everything written since the
  last snapshot is gone when redis-server restarts or crashes;
- ``appendonly yes`` + ``appendfsync no``: a redis-server crash loses nothing
  it wrote, a host crash or power loss what the OS had not flushed (~30 s);
- ``appendfsync everysec`` (Redis's default with AOF): a host crash loses up
  to ~1 s, and while the disk is slow Redis delays its write by up to 2 s and
  replies anyway, so even a redis-server crash can lose that much;
- ``appendfsync always``: Redis writes and fsyncs the AOF before it replies,
  so no crash of the server or its host loses an acknowledged write.

Only the last keeps every acknowledged claim, so ``check`` warns for the
others, and ``[store.redis] require_durable = true`` refuses to start on them.
Managed services often disable or rename ``CONFIG``: then nothing can be
checked, which is said as such (and is fatal under ``require_durable``).
Replication does not change this: a replica is written after the primary has
replied (see ``wait_replicas`` and ``docs/redis.md``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from x402srv.plugin import ConfigError

from .connection import describe

__all__ = ["Persistence", "check", "read_persistence"]

log = logging.getLogger("x402srv_redis")

_FIX = "set appendonly yes and appendfsync always on the server (docs/redis.md)"


@dataclass(frozen=True, slots=True)
class Persistence:
    """The server's ``appendonly`` and ``appendfsync``; ``unreadable`` says why they are unknown."""

    appendonly: str | None = None
    appendfsync: str | None = None
    unreadable: str | None = None

    @property
    def durable(self) -> bool:
        return self.appendonly == "yes" and self.appendfsync == "always"

    def risk(self) -> str | None:
        """What a crash can take of the acknowledged writes; ``None`` when nothing."""
        if self.unreadable is not None:
            return (
                f"could not read the server's persistence settings ({self.unreadable}; "
                "a managed Redis often disables CONFIG), so whether a crash loses "
                "acknowledged payment claims is not known here"
            )
        if self.appendonly != "yes":
            return (
                "appendonly is off: every write since the last RDB snapshot (all of them "
                "without snapshots), acknowledged payment claims included, is lost when "
                "redis-server restarts or crashes"
            )
        if self.appendfsync == "everysec":
            return (
                "appendfsync is everysec: a host crash or power loss loses up to ~1 s of "
                "acknowledged writes, and while the disk is slow Redis delays its AOF write by "
                "up to 2 s and replies anyway, so a redis-server crash can lose that much too"
            )
        if self.appendfsync == "no":
            return (
                "appendfsync is no: a host crash or power loss loses the acknowledged writes "
                "the OS had not flushed yet (typically up to 30 s)"
            )
        if not self.durable:
            return f"appendfsync is {self.appendfsync!r}, which this store does not know"
        return None


async def read_persistence(client: Redis) -> Persistence:
    """``CONFIG GET appendonly`` and ``appendfsync``; a refused CONFIG is ``unreadable``.

    Connection errors propagate: the caller decides what a server that is down means.
    """
    try:
        found = await client.config_get("append*")
    except ResponseError as exc:  # unknown command (renamed/disabled), NOPERM (ACL)
        return Persistence(unreadable=f"CONFIG GET refused: {describe(exc)}")
    if not isinstance(found, dict) or "appendonly" not in found:
        return Persistence(unreadable="CONFIG GET answered without appendonly")
    return Persistence(str(found["appendonly"]).lower(), str(found.get("appendfsync", "")).lower())


async def check(client: Redis, where: str, *, require_durable: bool) -> Persistence | None:
    """Log what the server keeps; raise ``ConfigError`` under ``require_durable`` if not all.

    ``None`` when the server could not be reached (the caller already warns about
    that; under ``require_durable`` it is fatal, since nothing could be checked).
    """
    try:
        persistence = await read_persistence(client)
    except (RedisError, OSError) as exc:
        if require_durable:
            raise ConfigError(
                f"require_durable: could not check the server's persistence ({describe(exc)})",
                path="store.redis.require_durable",
            ) from None
        return None
    risk = persistence.risk()
    if risk is None:
        log.info(
            "redis store %s: appendonly yes, appendfsync always: no crash of Redis or its "
            "host loses an acknowledged write",
            where,
        )
    elif require_durable:
        raise ConfigError(
            f"require_durable: {risk}; {_FIX}, or set require_durable = false",
            path="store.redis.require_durable",
        )
    else:
        log.warning("redis store %s: %s; %s", where, risk, _FIX)
    return persistence
