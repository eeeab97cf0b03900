"""``[[mcp]]``: an MCP server's tools sold through x402srv (docs/mcp.md).

```toml
[[mcp]]
path = "/mcp"                              # where buyers' MCP clients connect
upstream = "http://127.0.0.1:9100/mcp"     # the seller's MCP server (Streamable HTTP)
plans = ["calls-100"]                      # plans whose tokens open it; default: every plan
unlisted_tools = { cost = 1 }              # a tool not named below (the default)

[mcp.tools]
ping = { free = true }                     # anyone may call it
search = { cost = 2 }                      # 2 credits of a plan that sells calls
report = { price = "$0.05" }               # or one call for $0.05 (the exact payment)
summarize = { cost = { reserve = 500, from = "meta" } }   # what the tool's result reports
```

A tool is one of three things:

- ``free = true``: forwarded for anyone;
- ``cost = N``: a token of one of the route's plans opens it and spends ``N``
  credits when its plan sells calls (a plan that sells time spends none);
- ``cost = { reserve = N, from = "meta" }``: charged by use, as a gateway
  route can be (``ToolUsageCost``): ``N`` credits reserved, then what the
  tool's result reports in ``_meta["x402srv/usage"]`` kept, capped at ``N``;
- ``price = "$x"``: also sold one call at a time. x402srv turns each price
  into a plan of one call (``mcp.<tool>``, see ``per_call_plan_id``): the
  pipeline settles it like any purchase, and the call spends the one credit,
  so one payment runs the tool once however often it is sent. ``cost`` may sit
  beside it (the credits the route's plans pay for the same tool).

``Config`` holds ``mcp: list[McpConfig]`` and calls ``check_mcp`` once the plans are
resolved, as it does ``check_routes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from x402srv.config.fields import StrictModel
from x402srv.config.plans import PlanTerms

__all__ = ["USAGE_META", "McpConfig", "ToolPrice", "ToolUsageCost", "check_mcp", "per_call_plan_id"]

_PATH: Final = re.compile(r"(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)+")
#: Tool names as the MCP specification allows them (letters, digits, ``_``, ``-``, ``.``).
_TOOL: Final = re.compile(r"[A-Za-z0-9_.-]{1,60}")
_PRICE: Final = re.compile(r"\$([0-9]+)(?:\.([0-9]+))?")


#: Where a tool charged by use reports its cost (``{"cost": N}``) in its result's ``_meta``,
#: and where the buyer reads what it was charged (``{"reserved", "charged", "balance"}``).
USAGE_META: Final = "x402srv/usage"


class ToolUsageCost(StrictModel):
    """``cost = { reserve = N, from = "meta" }``: a tool call costs what its result reports.

    ``reserve`` credits are taken before the call is forwarded; the integer
    ``cost`` in the result's ``_meta["x402srv/usage"]`` (capped at ``reserve``)
    is kept and the rest given back (docs/mcp.md, "Tools charged by use").
    ``on_missing``: what a call whose result reported nothing usable costs.
    """

    reserve: int = Field(ge=1, le=1_000_000)
    source: Literal["meta"] = Field(default="meta", alias="from")
    on_missing: Literal["reserve", "nothing"] = "reserve"


def _cost_kind(value: object) -> str:
    """Which form of ``cost`` a value is, so an error names only that form's rule."""
    return "~table" if isinstance(value, dict | ToolUsageCost) else "~number"


def per_call_plan_id(tool: str) -> str:
    """The plan of one call of ``tool``: its id in purchases, tokens and the console."""
    return f"mcp.{tool}"


class ToolPrice(StrictModel):
    """What one tool costs: free, credits of the route's plans, and/or a price per call."""

    free: Literal[True] | None = None
    cost: (
        Annotated[
            Annotated[Annotated[int, Field(ge=1, le=1_000_000)], Tag("~number")]
            | Annotated[ToolUsageCost, Tag("~table")],
            Discriminator(_cost_kind),
        ]
        | None
    ) = None
    price: str | None = None

    @field_validator("price")
    @classmethod
    def _price(cls, value: str | None) -> str | None:
        if value is not None and not _PRICE.fullmatch(value):
            raise ValueError('must look like "$0.05" (a dollar sign and a decimal)')
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ToolPrice:
        if self.free and (self.cost is not None or self.price is not None):
            raise ValueError("a free tool has no cost or price (remove free, or them)")
        return self

    @property
    def credits(self) -> int:
        """The credits a call spends (reserves, when charged by use) on a plan that sells calls."""
        if isinstance(self.cost, ToolUsageCost):
            return self.cost.reserve
        return self.cost if self.cost is not None else 1

    @property
    def usage(self) -> ToolUsageCost | None:
        """How the tool reports a call's cost, when it is charged by use."""
        return self.cost if isinstance(self.cost, ToolUsageCost) else None

    def describe(self) -> str:
        """One line for ``tools/list`` and ``check``."""
        if self.free:
            return "free"
        plural = "s" if self.credits != 1 else ""
        if self.usage is not None:
            parts = [f"up to {self.credits} credit{plural} of a plan, charged by use"]
        else:
            parts = [f"{self.credits} credit{plural} of a plan"]
        if self.price is not None:
            parts.append(f"{self.price} per call")
        return " or ".join(parts)


class McpConfig(StrictModel):
    """One ``[[mcp]]`` table: a path on x402srv in front of one MCP server."""

    path: str
    upstream: str
    plans: list[str] | None = None
    tools: dict[str, ToolPrice] = {}
    unlisted_tools: ToolPrice = ToolPrice()
    description: str | None = Field(default=None, min_length=1)
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    read_timeout_seconds: float = Field(default=300.0, gt=0, le=3600)
    #: A JSON-RPC message larger than this is refused before anything else reads it.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    #: A failed tool (``isError``, a JSON-RPC error, an upstream failure) gets its credits back.
    refund_on_error: bool = True

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not _PATH.fullmatch(value) or any(s in (".", "..") for s in value.split("/")):
            raise ValueError('must be a path like "/mcp" (no trailing slash)')
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
            raise ValueError("must be the http(s) URL of a Streamable HTTP MCP endpoint")
        if parts.fragment or parts.username or parts.password:
            raise ValueError("must have no fragment or credentials")
        return value

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: dict[str, ToolPrice]) -> dict[str, ToolPrice]:
        for name in value:
            if not _TOOL.fullmatch(name):
                raise ValueError(
                    f"{name!r} is not a tool name x402srv can price ([A-Za-z0-9_.-]{{1,60}})"
                )
        return value

    def price_of(self, tool: str) -> ToolPrice:
        return self.tools.get(tool, self.unlisted_tools)

    def priced_tools(self) -> dict[str, str]:
        """Tool -> per-call price, for the tools sold one call at a time."""
        return {name: t.price for name, t in self.tools.items() if t.price is not None}


def check_mcp(
    servers: Sequence[McpConfig],
    plans: Mapping[str, PlanTerms],
    issuer: str,
    taken: Mapping[str, str],
) -> None:
    """Checks that need the rest of the config; ``ValueError`` names the key path.

    ``plans`` are the seller's resolved plans (not the per-call ones), ``taken``
    the paths other parts of x402srv answer (path -> what).
    """
    seen: dict[str, str] = dict(taken)
    for index, server in enumerate(servers):
        path = f"mcp[{index}]"
        for other, what in seen.items():
            if (
                server.path == other
                or server.path.startswith(other.rstrip("/") + "/")
                or (other.startswith(server.path + "/"))
            ):
                raise ValueError(f"{path}.path: {server.path} overlaps {what} ({other})")
        seen[server.path] = "an [[mcp]] path"
        if server.plans == []:
            raise ValueError(f"{path}.plans: must name at least one plan (or be left out)")
        for plan_id in server.plans or ():
            if plan_id not in plans:
                raise ValueError(f"{path}.plans: no plan {plan_id!r}")
        chosen = [plans[plan_id] for plan_id in server.plans or plans]
        selling = [plan for plan in chosen if plan.calls is not None]
        priced = [(f"{path}.tools.{name}", t) for name, t in server.tools.items()]
        for key, tool in [*priced, (f"{path}.unlisted_tools", server.unlisted_tools)]:
            if tool.cost is None:
                continue
            if not selling:
                raise ValueError(
                    f"{key}.cost: ignored, because none of the route's plans sells calls "
                    "(set calls = N on one, or remove the key)"
                )
            for plan in selling:
                assert plan.calls is not None
                if plan.calls < tool.credits:
                    raise ValueError(
                        f"{key}.cost: a call costs {tool.credits} credits but plan "
                        f"{plan.plan_id!r} sells only {plan.calls}: its buyers could never make one"
                    )
        if server.unlisted_tools.price is not None:
            raise ValueError(
                f"{path}.unlisted_tools.price: a per-call price needs the tool's name "
                "(list it under [mcp.tools])"
            )
    if servers and issuer != "jwt":
        raise ValueError(
            "mcp: x402srv verifies the tokens MCP clients send, so it needs "
            f'credentials.issuer = "jwt" (not {issuer!r})'
        )
