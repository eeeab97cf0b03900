"""What a plan includes besides its price: a period, calls, a rate limit.

A plan sells time (``token_ttl_seconds``: the token's lifetime), calls
(``calls``: credits kept in the store per grant, spent by the metered routes),
or both: the first to run out ends the grant. ``rate_limit`` caps the calls
per grant and window (``"10/s"``, ``"600/min"``, ``"5000/h"``, ``"20000/day"``).
A plan that sells calls and names no period gets ``CALLS_TOKEN_TTL_SECONDS``:
its token must expire some day (and its records and credits with it).

Buyers see the terms before they pay: ``wire_terms`` is what the discovery
offer's ``plans[]`` and every requirement's ``extra`` carry, ``describe`` the
sentence on the agent card. Both read a plan through ``PlanTerms``, the few
fields they need, so this module does not import the config model that uses it.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol

from x402srv.interfaces import RateWindow

__all__ = [
    "CALLS_TOKEN_TTL_SECONDS",
    "CREDITS_OUTLIVE_TOKEN_SECONDS",
    "PlanTerms",
    "describe",
    "parse_rate_limit",
    "rate_limit_text",
    "wire_terms",
]

#: The token lifetime of a plan that sells calls and sets no ``token_ttl_seconds``: 7 days.
CALLS_TOKEN_TTL_SECONDS: Final = 7 * 86_400
#: A grant's credits stay in the store this long after its token expired (for operators).
CREDITS_OUTLIVE_TOKEN_SECONDS: Final = 86_400

_UNITS: Final = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "day": 86_400,
}
_RATE: Final = re.compile(r"\s*([0-9]{1,9})\s*/\s*([a-z]+)\s*")
_NAMES: Final = {1: "second", 60: "minute", 3600: "hour", 86_400: "day"}


class PlanTerms(Protocol):
    """What a plan sells, as the config resolves it (``x402srv.config.models.Plan``).

    Read-only: the routes check and the wire read a plan, never change it.
    """

    @property
    def plan_id(self) -> str: ...
    @property
    def token_ttl_seconds(self) -> int: ...
    @property
    def calls(self) -> int | None: ...
    @property
    def rate(self) -> RateWindow | None: ...


def parse_rate_limit(text: str) -> RateWindow:
    """``"10/s"`` -> ``RateWindow(10, 1)``; ``ValueError`` with the accepted forms."""
    match = _RATE.fullmatch(text.lower())
    if match is None or match[2] not in _UNITS:
        raise ValueError(
            f'{text!r} is not a rate: write "<calls>/<unit>" with unit s, min, h or day '
            '(e.g. "10/s", "600/min")'
        )
    limit = int(match[1])
    if limit <= 0:
        raise ValueError(f"{text!r} allows no call at all; the limit must be at least 1")
    return RateWindow(limit, _UNITS[match[2]])


def rate_limit_text(rate: RateWindow) -> str:
    unit = {1: "s", 60: "min", 3600: "h", 86_400: "day"}.get(rate.seconds, f"{rate.seconds}s")
    return f"{rate.limit}/{unit}"


def wire_terms(plan: PlanTerms) -> dict[str, Any]:
    """``periodSeconds``, ``calls`` (if sold) and ``rateLimit`` (if any), as agents read them."""
    terms: dict[str, Any] = {"periodSeconds": plan.token_ttl_seconds}
    if plan.calls is not None:
        terms["calls"] = plan.calls
    if plan.rate is not None:
        terms["rateLimit"] = {"limit": plan.rate.limit, "windowSeconds": plan.rate.seconds}
    return terms


def _duration(seconds: int) -> str:
    for size, name in ((86_400, "day"), (3600, "hour"), (60, "minute")):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {name}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def describe(plan: PlanTerms) -> str:
    """``"1000 calls within 7 days, at most 10 per second"``; ``"1 hour"`` for a time pass."""
    period = _duration(plan.token_ttl_seconds)
    text = period if plan.calls is None else f"{plan.calls} calls within {period}"
    if plan.rate is not None:
        unit = _NAMES.get(plan.rate.seconds, f"{plan.rate.seconds} seconds")
        text += f", at most {plan.rate.limit} per {unit}"
    return text
