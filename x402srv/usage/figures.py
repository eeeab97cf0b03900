"""The console's figures, read from the store's per-hour counters (``x402srv.usage.counters``).

Nothing here reads a challenge record: a range of hours is one
``Store.read_counts`` call, whatever the number of purchases, and the sums
are done here. Revenue is counted per plan, network, asset and price, so the
amount is exact integer arithmetic in the token's atomic units; its US dollar
value is given for USD stablecoins (an asset whose EIP-712 name says USD).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from x402srv.config.models import Config
from x402srv.errors import InvalidRequest
from x402srv.usage.counters import HOUR, hour_of
from x402srv.wire.offers import rfc3339

__all__ = [
    "DAY",
    "MAX_POINTS",
    "Period",
    "funnel",
    "parse_time",
    "period",
    "revenue",
    "settler_figures",
    "token_terms",
    "tool_figures",
    "usd",
]

DAY = 24 * HOUR
#: Points one series may have: a year of days, or a month of hours and then some.
MAX_POINTS = 1000

Bucket = Literal["hour", "day"]
Counts = Mapping[tuple[int, str], int]


def parse_time(text: str, name: str) -> float:
    """RFC 3339 (``2026-11-21T10:00:00Z``), a date (``2026-11-21``, UTC midnight) or epoch s."""
    value = text.strip()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidRequest(
            f"{name}: not a time (RFC 3339, a date, or seconds since the epoch)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


@dataclass(frozen=True, slots=True)
class Period:
    """A half-open range of whole buckets ``[start, end)``."""

    start: int
    end: int
    bucket: Bucket

    @property
    def size(self) -> int:
        return DAY if self.bucket == "day" else HOUR

    @property
    def starts(self) -> list[int]:
        return list(range(self.start, self.end, self.size))

    def describe(self) -> dict[str, Any]:
        return {"from": rfc3339(self.start), "to": rfc3339(self.end), "bucket": self.bucket}


def period(
    now: float, start: str | None, end: str | None, bucket: str | None, *, days: float = 7
) -> Period:
    """The range asked for (default: the last ``days`` days), widened to whole buckets."""
    until = parse_time(end, "to") if end else now
    since = parse_time(start, "from") if start else until - days * DAY
    if since >= until:
        raise InvalidRequest("from must be before to")
    chosen = bucket or ("hour" if until - since <= 3 * DAY else "day")
    if chosen not in ("hour", "day"):
        raise InvalidRequest("bucket must be hour or day")
    size = DAY if chosen == "day" else HOUR
    first = int(since // size) * size
    last = -(-int(until) // size) * size
    if (last - first) // size > MAX_POINTS:
        raise InvalidRequest(
            f"that range has more than {MAX_POINTS} {chosen}s; ask for a shorter one or by day"
        )
    return Period(first, last, "day" if chosen == "day" else "hour")


def usd(amount: int, decimals: int) -> str:
    """An atomic amount of a USD stablecoin as dollars: exact, at least two decimals."""
    return _dollars(Decimal(amount).scaleb(-decimals))


def _dollars(value: Decimal) -> str:
    whole, _, fraction = format(value, "f").partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def token_terms(config: Config, network: str, asset: str) -> tuple[int | None, bool]:
    """(decimals, is a USD stablecoin) of a token the config sells in; (None, False) if none."""
    option = config.option(network, asset)
    if option is None:
        return None, False
    return option.decimals, "usd" in option.asset_name.lower()


def revenue(counts: Counts, window: Period, config: Config) -> dict[str, Any]:
    """Settled payments per plan, network and asset, per bucket: counts and amounts.

    Amounts are net of refunds: a refund on-chain (``refund:`` counters, in atomic
    units, in the hour it was refunded) is taken off its purchase's plan, network
    and asset in that bucket, and shown in ``refunded``; ``counts`` stay sales.
    """
    size = window.size
    index = {start: i for i, start in enumerate(window.starts)}
    series: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (hour, name), n in counts.items():
        refund = name.startswith("refund:")
        if not name.startswith("settled:") and not refund:
            continue
        try:
            if refund:  # refund:<plan>|<network>|<asset>, counted in atomic units
                plan, network, asset = name[len("refund:") :].split("|")
                amount = -1
            else:
                plan, network, asset, amount_text = name[len("settled:") :].split("|")
                amount = int(amount_text)
        except ValueError:
            continue
        slot = index.get(int(hour // size) * size)
        if slot is None:
            continue
        row = series.get((plan, network, asset))
        if row is None:
            points = len(index)
            row = series[(plan, network, asset)] = {
                "planId": plan,
                "network": network,
                "asset": asset,
                "counts": [0] * points,
                "amounts": [0] * points,
                "refunded": [0] * points,
            }
        if refund:
            row["refunded"][slot] += n
        else:
            row["counts"][slot] += n
        row["amounts"][slot] += n * amount  # net: a refund takes its amount off
    out_series, totals, total_usd, all_usd = [], [], Decimal(0), True
    for key in sorted(series):
        row = series[key]
        decimals, pegged = token_terms(config, row["network"], row["asset"])
        count, amount = sum(row["counts"]), sum(row["amounts"])
        refunded = sum(row["refunded"])
        dollars = usd(amount, decimals) if decimals is not None and pegged else None
        if dollars is None:
            all_usd = False
        else:
            total_usd += Decimal(dollars)
        out_series.append(
            {
                **row,
                "decimals": decimals,
                "amounts": [str(a) for a in row["amounts"]],
                "refunded": [str(a) for a in row["refunded"]],
                "usd": [
                    usd(a, decimals) if decimals is not None and pegged else None
                    for a in row["amounts"]
                ],
            }
        )
        totals.append(
            {
                "planId": row["planId"],
                "network": row["network"],
                "asset": row["asset"],
                "count": count,
                "amount": str(amount),
                "refunded": str(refunded),
                "usd": dollars,
            }
        )
    return {
        **window.describe(),
        "buckets": [rfc3339(start) for start in window.starts],
        "series": out_series,
        "totals": totals,
        "totalUsd": _dollars(total_usd) if all_usd else None,
    }


def funnel(counts: Counts) -> dict[str, Any]:
    """Unpaid requests -> challenges -> payments tried -> settled -> delivered, and why not."""
    stages = {"unpaid": 0, "challenges": 0, "tried": 0, "settled": 0, "delivered": 0}
    limited = revoked = owed = refunded = 0
    failures: dict[str, int] = {}
    by_plan: dict[str, dict[str, int]] = {}
    prefixes = {
        "challenge:": "challenges",
        "tried:": "tried",
        "settled:": "settled",
        "delivered:": "delivered",
    }
    for (_, name), n in counts.items():
        if name == "unpaid":
            stages["unpaid"] += n
        elif name == "limited":
            limited += n
        elif name.startswith("revoked:"):
            revoked += n
        elif name.startswith("owed:"):
            owed += n
        elif name.startswith("refunded:"):
            refunded += n
        elif name.startswith("failed:"):
            reason = name[len("failed:") :]
            failures[reason] = failures.get(reason, 0) + n
        else:
            for prefix, stage in prefixes.items():
                if name.startswith(prefix):
                    plan = name[len(prefix) :].split("|", 1)[0]
                    stages[stage] += n
                    per = by_plan.setdefault(plan, dict.fromkeys(prefixes.values(), 0))
                    per[stage] += n
                    break
    return {
        "stages": [{"stage": stage, "count": count} for stage, count in stages.items()],
        "rateLimited": limited,
        "revoked": revoked,
        "owed": owed,
        "refunded": refunded,
        "failures": [
            {"reason": reason, "count": count}
            for reason, count in sorted(failures.items(), key=lambda item: (-item[1], item[0]))
        ],
        "byPlan": [{"planId": plan, **by_plan[plan]} for plan in sorted(by_plan)],
    }


def settler_figures(counts: Counts) -> list[dict[str, Any]]:
    """Per settler: calls by outcome and the mean time per call."""
    settlers: dict[str, dict[str, int]] = {}
    for (_, name), n in counts.items():
        if not name.startswith("settler:"):
            continue
        settler, _, outcome = name[len("settler:") :].rpartition(":")
        figures = settlers.setdefault(settler, {})
        figures[outcome] = figures.get(outcome, 0) + n
    out = []
    for settler in sorted(settlers):
        figures = settlers[settler]
        ms = figures.pop("ms", 0)
        calls = sum(figures.values())
        out.append(
            {
                "name": settler,
                "calls": calls,
                "outcomes": dict(sorted(figures.items())),
                "meanMs": round(ms / calls, 1) if calls else None,
            }
        )
    return out


def tool_figures(counts: Counts) -> list[dict[str, Any]]:
    """Per MCP tool: calls by outcome and the credits they spent (``tool:`` counters)."""
    tools: dict[str, dict[str, int]] = {}
    for (_, name), n in counts.items():
        if not name.startswith("tool:"):
            continue
        tool, _, outcome = name[len("tool:") :].rpartition(":")
        figures = tools.setdefault(tool, {})
        figures[outcome] = figures.get(outcome, 0) + n
    out = []
    for tool in sorted(tools):
        figures = tools[tool]
        credits = figures.pop("credits", 0)
        out.append(
            {
                "name": tool,
                "calls": sum(figures.values()),
                "outcomes": dict(sorted(figures.items())),
                "credits": credits,
            }
        )
    return out


def last_hours(now: float, hours: int) -> tuple[int, int]:
    """The ``[start, end)`` of the last ``hours`` whole hours, the current one included."""
    end = hour_of(now) + HOUR
    return end - hours * HOUR, end
