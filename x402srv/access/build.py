"""``build_pipeline``: the one place an ``AccessPipeline`` is made from a config's plugins.

The server (``server/app.py``, once per worker) and the operator commands
(``cli/operations.py``) both build it here, so they cannot drift apart: the
same store, settler, issuer and chain readers, the same clock, and the unpaid
request limiter whenever ``[rate_limit]`` enables it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from x402srv.access.pipeline import AccessPipeline
from x402srv.config.models import Config
from x402srv.interfaces import Clock, system_clock
from x402srv.usage.unpaid_limit import LimitOptions, UnpaidLimiter

if TYPE_CHECKING:
    from x402srv.server.registry import Built

__all__ = ["build_pipeline"]


def build_pipeline(config: Config, built: Built, *, clock: Clock = system_clock) -> AccessPipeline:
    """The pipeline of ``config`` over its built (not yet started) plugins."""
    limits = config.rate_limit
    limiter = (
        UnpaidLimiter(
            built.store, LimitOptions(limits.unpaid_requests, limits.window_seconds), clock
        )
        if limits.enabled
        else None
    )
    return AccessPipeline(
        config,
        store=built.store,
        settler=built.settler,
        issuer=built.issuer,
        chain=built.chains,
        clock=clock,
        limiter=limiter,
    )
