"""``wait_replicas``: a write counts as done only once that many replicas have it.

Redis replicates after it replies, so a failover can forget writes the old
primary acknowledged. With ``wait_replicas = n`` every writing script goes out
with ``WAIT n timeout`` behind it, on the same connection and in the same round
trip (a pipeline, not a transaction: ``WAIT`` is not allowed inside one). If
fewer than ``n`` replicas confirm within the timeout the write has still been
applied on this server, but the caller gets ``ReplicasBehind`` (a 503 like any
outage) instead of an acknowledgment, so nothing goes on-chain on its strength;
whether it survives a failover is then open, exactly as for a reply lost to a
dropped connection, and the pipeline reads the record again on the next request.

This is also what refuses writes to a primary that was just demoted: its
replica was promoted and no longer follows it, so ``WAIT`` finds nobody.
"""

from __future__ import annotations

import math
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, RedisError

__all__ = ["ReplicasBehind", "run_waited", "writes"]


class ReplicasBehind(RedisError):
    """Fewer replicas than ``wait_replicas`` confirmed a write in time."""


def writes(script: AsyncScript) -> bool:
    """Whether a script may write: every one not declared ``flags=no-writes``."""
    source = script.script
    text = source.decode() if isinstance(source, bytes) else str(source)
    return not text.startswith("#!lua flags=no-writes")


async def run_waited(
    client: Redis, script: AsyncScript, keys: list[str], args: list[Any], replicas: int,
    wait_seconds: float,
) -> Any:  # fmt: skip
    """``script`` then ``WAIT replicas timeout`` in one round trip; the script's reply.

    ``NOSCRIPT`` (a restarted or new primary that never saw the script) means it
    did not run: load it and send both again.
    """
    timeout_ms = max(1, math.ceil(wait_seconds * 1000))
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        pipe.evalsha(script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        reply, confirmed = await pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError) and attempt == 0:
            await client.script_load(script.script)
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(confirmed, Exception):
            raise confirmed
        if int(confirmed) < replicas:
            raise ReplicasBehind(
                f"{confirmed} of {replicas} replicas confirmed in {wait_seconds:g} s"
            )
        return reply
    raise NoScriptError("the script could not be loaded")
