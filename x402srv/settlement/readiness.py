"""Whether one settler can settle now: its own ``check_ready``, bounded and never raising.

``/readyz`` (``NetworkSettlers.readiness``), a failover network's members and
``x402srv check`` all ask a settler the same way, through ``settler_problem``.
"""

from __future__ import annotations

import asyncio

from x402srv.interfaces import Settler

__all__ = ["CHECK_TIMEOUT_SECONDS", "settler_problem"]

#: How long one readiness check may take before it counts as failed.
CHECK_TIMEOUT_SECONDS = 3.0


async def settler_problem(settler: Settler) -> str | None:
    """Why ``settler`` cannot settle now, or None (also for one without ``check_ready``)."""
    probe = getattr(settler, "check_ready", None)
    if not callable(probe):
        return None
    try:
        result: str | None = await asyncio.wait_for(probe(), CHECK_TIMEOUT_SECONDS)
    except Exception as exc:  # a probe that breaks is a settler that is not ready
        return f"unavailable ({type(exc).__name__})"
    return result
