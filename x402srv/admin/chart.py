"""The overview's pictures, computed on the server: a revenue bar chart (SVG) and the funnel.

No charting library and no script: the console's pages are plain HTML with an
inline SVG whose geometry is decided here, from the documents the admin API
answers (``figures.revenue``, ``figures.funnel``). Each bar carries a
``<title>`` (the bucket, the plan and its value), which browsers show on hover.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["Bar", "Chart", "FunnelStep", "funnel_steps", "revenue_chart"]

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 8, 12, 28
#: Plan colours, in series order (the console's stylesheet uses the same palette).
PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2")


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: str
    title: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    y_ticks: list[tuple[float, str]]
    x_labels: list[tuple[float, str, str]]  # x, text, SVG text-anchor
    legend: list[tuple[str, str]]
    unit: str
    total: str
    empty: bool
    baseline: float


def _value(series: dict[str, Any], index: int) -> Decimal:
    dollars = series["usd"][index]
    return Decimal(dollars) if dollars is not None else Decimal(series["counts"][index])


def _label(bucket: str, by: str) -> str:
    # "2026-11-21T10:00:00Z" -> "11-21 10:00" by hour, "11-21" by day
    return f"{bucket[5:10]} {bucket[11:16]}" if by == "hour" else bucket[5:10]


def _money(value: Decimal, unit: str) -> str:
    if unit == "USD":
        return f"${value:,.2f}"
    return f"{int(value):,}"


def revenue_chart(revenue: dict[str, Any]) -> Chart:
    """Stacked bars, one per bucket, one colour per plan (network and asset)."""
    buckets: list[str] = revenue["buckets"]
    series: list[dict[str, Any]] = revenue["series"]
    unit = "USD" if series and all(s["usd"][0] is not None for s in series) else "sales"
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    totals = [sum((_value(s, i) for s in series), Decimal(0)) for i in range(len(buckets))]
    top = max(totals, default=Decimal(0))
    scale = Decimal(plot_h) / top if top > 0 else Decimal(0)
    step = plot_w / max(len(buckets), 1)
    width = max(step * 0.72, 1.0)
    bars: list[Bar] = []
    for i, bucket in enumerate(buckets):
        y = float(TOP + plot_h)
        for n, one in enumerate(series):
            value = _value(one, i)
            if value <= 0:
                continue
            height = float(value * scale)
            y -= height
            count = one["counts"][i]
            bars.append(
                Bar(
                    x=LEFT + i * step + (step - width) / 2,
                    y=y,
                    width=width,
                    height=height,
                    color=PALETTE[n % len(PALETTE)],
                    title=f"{_label(bucket, revenue['bucket'])} {one['planId']}: "
                    f"{_money(value, unit)} ({count} sale{'s' if count != 1 else ''})",
                )
            )
    ticks = [
        (float(TOP + plot_h - plot_h * f), _money(top * Decimal(f), unit)) for f in (0, 0.5, 1)
    ]
    marks = sorted({0, len(buckets) // 2, len(buckets) - 1}) if buckets else []
    labels = [
        (
            LEFT + i * step + step / 2,
            _label(buckets[i], revenue["bucket"]),
            "start"
            if i == 0 and len(buckets) > 1
            else "end"
            if i == len(buckets) - 1
            else "middle",
        )
        for i in marks
    ]
    legend = [
        (PALETTE[n % len(PALETTE)], f"{s['planId']} ({s['network']})") for n, s in enumerate(series)
    ]
    total = revenue.get("totalUsd")
    sales = sum(sum(s["counts"]) for s in series)
    shown = f"${Decimal(total):,.2f}" if total is not None else f"{sales:,} sales"
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        bars=bars,
        y_ticks=ticks if top > 0 else [(float(TOP + plot_h), _money(Decimal(0), unit))],
        x_labels=labels,
        legend=legend,
        unit=unit,
        total=shown,
        empty=not bars,
        baseline=float(TOP + plot_h),
    )


@dataclass(frozen=True, slots=True)
class FunnelStep:
    """One row of the funnel: its bar and the percentage beside it are the same number.

    ``percent_of_max`` (the bar) is the share of the widest step, ``share`` that
    number as text; ``conversion``, the share of the step before, is said apart
    and named so (the console's "50% of the step before"): a bar drawn a third
    long beside "50%" told two stories at once.
    """

    name: str
    count: int
    percent_of_max: float
    share: str
    conversion: str | None  # share of the step before, as text


_NAMES = {
    "unpaid": "Unpaid requests (402s)",
    "challenges": "Challenges",
    "tried": "Payments tried",
    "settled": "Settled",
    "delivered": "Delivered",
}


def funnel_steps(funnel: dict[str, Any]) -> list[FunnelStep]:
    stages = funnel["stages"]
    top = max((stage["count"] for stage in stages), default=0) or 1
    steps, before = [], None
    for stage in stages:
        count = int(stage["count"])
        conversion = None
        if before is not None:
            conversion = f"{100 * count / before:.0f}%" if before else "—"
        name = _NAMES.get(stage["stage"], stage["stage"])
        percent = 100 * count / top
        steps.append(FunnelStep(name, count, percent, f"{percent:.0f}%", conversion))
        before = count
    return steps
