"""``[[routes]]``: the gateway's TOML, validated like the rest (docs/protocol/config.md).

```toml
[[routes]]
prefix = "/api"                          # path prefix, matched segment by segment
upstream = "http://127.0.0.1:9000"       # the seller's existing API (may carry a base path)
plans = ["hourly", "daily"]              # plans whose tokens open it; default: every plan
strip_prefix = false                     # true: /api/x is forwarded as <upstream>/x
secret = { env = "X402SRV_UPSTREAM_SECRET" }   # optional, sent as `secret_header`
secret_header = "X-X402-Gateway-Secret"
connect_timeout_seconds = 5              # -> 502/504 problem details when exceeded
read_timeout_seconds = 30
max_body_bytes = 10485760
cost = 1                                 # credits a call spends on plans that sell calls
# or, priced by what the call used (docs/selling-calls.md, "Charging by use"):
# cost = { reserve = 500, from = "header", header = "X-Usage-Cost", on_missing = "reserve" }
# (from = "sse": the last `event: usage` of a stream; from = "trailer": a chunked answer's trailer)
refund_on_5xx = true                     # an upstream 5xx (or 502/504) gives them back
```

``Config`` (``x402srv/config/models.py``) holds ``routes: list[RouteConfig]`` and calls
``check_routes`` once the plans are known, with the pieces it checks against (the plans
and the issuer), so this module does not import the model that imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import Discriminator, Field, Tag, field_validator

from x402srv.config.discovery import DiscoveryConfig
from x402srv.config.fields import StrictModel
from x402srv.config.plans import PlanTerms
from x402srv.config.secrets import SecretValue

__all__ = [
    "DEFAULT_SECRET_HEADER",
    "DEFAULT_USAGE_HEADER",
    "RouteConfig",
    "UsageCost",
    "check_routes",
]

DEFAULT_SECRET_HEADER: Final = "X-X402-Gateway-Secret"  # noqa: S105 - a header name
_PREFIX: Final = re.compile(r"/|(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+")
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,64}")
#: Where a metered route's upstream reports a call's cost by default.
DEFAULT_USAGE_HEADER: Final = "X-Usage-Cost"


class UsageCost(StrictModel):
    """``cost = { reserve = N, from = ... }``: a call costs what its upstream reports.

    ``reserve`` credits are taken before forwarding; after the answer the
    reported cost (capped at ``reserve``) is kept and the rest given back.
    ``from = "header"`` reads the integer in ``header`` of the answer;
    ``from = "sse"`` reads the ``cost`` field of the last ``event: usage`` of a
    server-sent-events stream; ``from = "trailer"`` the integer in the trailer
    field ``header`` of a chunked answer (docs/selling-calls.md, "Charging by use").
    ``on_missing``: what a call whose upstream reported nothing usable costs.
    """

    reserve: int = Field(ge=1, le=1_000_000)
    source: Literal["header", "sse", "trailer"] = Field(default="header", alias="from")
    header: str = DEFAULT_USAGE_HEADER
    on_missing: Literal["reserve", "nothing"] = "reserve"

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not _HEADER_NAME.fullmatch(value):
            raise ValueError("must be an HTTP header name (letters, digits, '-')")
        return value

    @property
    def at_end(self) -> bool:
        """Whether the cost is only known once the answer ended (a stream's event, a trailer)."""
        return self.source != "header"


def _cost_kind(value: object) -> str:
    """Which form of ``cost`` a value is, so an error names only that form's rule."""
    return "~table" if isinstance(value, dict | UsageCost) else "~number"


class RouteConfig(StrictModel):
    """One ``[[routes]]`` table: a path prefix x402srv forwards to the seller's API."""

    prefix: str
    upstream: str
    plans: list[str] | None = None
    strip_prefix: bool = False
    secret: SecretValue | None = None
    secret_header: str = DEFAULT_SECRET_HEADER
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    read_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=0)
    description: str | None = Field(default=None, min_length=1)
    #: A number of credits, or a table: what the upstream reports (``UsageCost``).
    cost: Annotated[
        Annotated[Annotated[int, Field(ge=1, le=1_000_000)], Tag("~number")]
        | Annotated[UsageCost, Tag("~table")],
        Discriminator(_cost_kind),
    ] = 1
    refund_on_5xx: bool = True
    #: What facilitators list (the bazaar extension): x402srv/config/discovery.py.
    discovery: DiscoveryConfig | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        # Unreserved characters only, no dot-segments: the prefix reads the same
        # raw and decoded, so matching it cannot depend on who decodes.
        if not _PREFIX.fullmatch(value) or any(s in (".", "..") for s in value.split("/")):
            raise ValueError('must be "/" or a path like "/api/v1" (no trailing slash)')
        return value

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            raise ValueError("is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("must have no query, fragment or credentials (use `secret`)")
        return value.rstrip("/")

    @field_validator("secret_header")
    @classmethod
    def _secret_header(cls, value: str) -> str:
        if not _HEADER_NAME.fullmatch(value):
            raise ValueError("must be an HTTP header name (letters, digits, '-')")
        return value

    @property
    def reserve(self) -> int:
        """The credits a call takes before it is forwarded (all it costs, unless metered)."""
        return self.cost.reserve if isinstance(self.cost, UsageCost) else self.cost

    @property
    def usage(self) -> UsageCost | None:
        """How the upstream reports a call's cost, on a route that charges by use."""
        return self.cost if isinstance(self.cost, UsageCost) else None

    @property
    def prefix_segments(self) -> tuple[str, ...]:
        return () if self.prefix == "/" else tuple(self.prefix[1:].split("/"))


def check_routes(
    routes: Sequence[RouteConfig], plans: Mapping[str, PlanTerms], issuer: str
) -> None:
    """Checks that need the rest of the config; ``ValueError`` names the key path.

    ``plans`` are the resolved plans by id, ``issuer`` is ``credentials.issuer``.
    """
    seen: set[str] = set()
    for index, route in enumerate(routes):
        path = f"routes[{index}]"
        if route.prefix in seen:
            raise ValueError(f"{path}.prefix: duplicate route prefix {route.prefix!r}")
        seen.add(route.prefix)
        for plan_id in route.plans or ():
            if plan_id not in plans:
                raise ValueError(f"{path}.plans: no plan {plan_id!r}")
        if route.plans == []:
            raise ValueError(f"{path}.plans: must name at least one plan (or be left out)")
        _check_cost(plans, route, path)
    if routes and issuer != "jwt":
        raise ValueError(
            "routes: the gateway verifies the tokens it forwards, so it needs "
            f'credentials.issuer = "jwt" (not {issuer!r})'
        )


def _check_cost(plans: Mapping[str, PlanTerms], route: RouteConfig, path: str) -> None:
    """A cost needs a plan that sells calls, and no plan may sell fewer calls than one costs.

    ``cost`` and ``refund_on_5xx`` are about credits: on a route whose plans sell
    none, either key would be ignored, so it is an error even at its default value
    (docs/configuration.md: every key takes effect).
    """
    chosen = [plans[plan_id] for plan_id in route.plans or plans]
    selling = [plan for plan in chosen if plan.calls is not None]
    if not selling:
        for key in ("cost", "refund_on_5xx"):
            if key in route.model_fields_set:
                raise ValueError(
                    f"{path}.{key}: ignored, because none of the route's plans sells calls "
                    "(set calls = N on one, or remove the key)"
                )
    if "secret_header" in route.model_fields_set and route.secret is None:
        raise ValueError(
            f"{path}.secret_header: ignored without secret (the header carries the secret)"
        )
    for plan in selling:
        assert plan.calls is not None
        if plan.calls < route.reserve:
            raise ValueError(
                f"{path}.cost: a call costs {route.reserve} credits but plan {plan.plan_id!r} "
                f"sells only {plan.calls}: its buyers could never make one"
            )
