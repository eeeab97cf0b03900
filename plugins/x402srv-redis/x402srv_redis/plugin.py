"""Entry point ``redis``: builds the store from ``[store] url`` and ``[store.redis]``.

Everything the TOML can get wrong fails here, before the server starts, with
its key path: no URL, an option out of range, or a record TTL too short for
the grants and payments it must outlive.
"""

from __future__ import annotations

from x402srv.plugin import ConfigError, PluginContext, Register, Store, hookimpl

from .options import RedisOptions
from .sentinel import SCHEME, parse_sentinel_url
from .store import RedisStore

__all__ = ["build_redis_store", "minimum_record_ttl", "register_stores"]


def minimum_record_ttl(ctx: PluginContext) -> int:
    """Seconds a record must live after its last write.

    A record is last written when it is delivered, and its grant is fetched
    again for up to the plan's token lifetime; before that, its payment claim
    must outlive the authorization's ``validBefore`` (at most
    ``max_timeout_seconds`` after the payment, which comes at most
    ``challenge_ttl_seconds`` after the challenge).
    """
    config = ctx.config
    longest_token = max(plan.token_ttl_seconds for plan in config.plans)
    return longest_token + config.server.max_timeout_seconds + config.server.challenge_ttl_seconds


def build_redis_store(ctx: PluginContext) -> RedisStore:
    """The factory ``[store] backend = "redis"`` selects."""
    options = ctx.parse_options(RedisOptions)
    url = ctx.config.store.url
    if url is None:
        raise ConfigError(
            'required by the redis store: "redis://[:password@]host:6379/0", "rediss://...", '
            '"redis+sentinel://host:26379,host:26379/service" or { env = "NAME" }',
            path="store.url",
        )
    scheme = url.reveal().partition("://")[0].lower()
    if scheme == SCHEME:
        parse_sentinel_url(url.reveal())  # a malformed one fails here, before serving
    if options.tls_ca_file is not None and scheme != "rediss":
        raise ConfigError("only applies to rediss:// URLs", path=f"{ctx.key_path}.tls_ca_file")
    needed = minimum_record_ttl(ctx)
    if options.record_ttl_seconds < needed:
        raise ConfigError(
            f"must be at least {needed} s: the longest plan token_ttl_seconds plus "
            "server.max_timeout_seconds plus server.challenge_ttl_seconds, so no claim "
            "expires while its payment can still be submitted and no grant before its token",
            path=f"{ctx.key_path}.record_ttl_seconds",
        )
    return RedisStore(url, options)


@hookimpl
def register_stores(register: Register[Store]) -> None:
    register("redis", build_redis_store)
