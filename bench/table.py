"""The printed table: one row per figure, with what was measured and the target it meets.

Every figure a reader compares is given with its spread over the runs (``Spread``:
min / median / max), and the machine's load average when the row was measured, so a
noisy neighbour shows in the table instead of hiding in a single number. A scenario
that fails leaves a ``FAILED`` row (``failed``) and the others keep theirs.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["Row", "Spread", "Verdict", "failed", "load_average", "render", "verdict"]


@dataclass(frozen=True)
class Verdict:
    target: str
    passed: bool
    detail: str  # the ratio or number the target is judged on

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'MISS'} {self.detail} (target {self.target})"


def verdict(target: str, passed: bool, detail: str) -> Verdict:
    return Verdict(target, passed, detail)


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


@dataclass(frozen=True)
class Spread:
    """One measure over several runs: judged on its median, printed with min and max."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("a spread needs at least one run")
        return cls(tuple(values))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def show(self, fmt: Callable[[float], str]) -> str:
        """``median (min-max)``, or the one value of a single run."""
        if len(self.values) == 1:
            return fmt(self.values[0])
        return f"{fmt(self.median)} ({fmt(self.low)}-{fmt(self.high)})"


def rate(value: float) -> str:
    return f"{value:,.0f}"


def ms(value: float) -> str:
    return f"{value:.1f}"


def times(value: float) -> str:
    return f"{value:.2f}x"


@dataclass(frozen=True)
class Row:
    section: str
    subject: str
    figures: str
    verdicts: tuple[Verdict, ...] = ()
    #: The 1-minute load average when the row was made (right after its measurement).
    load: float = field(default_factory=load_average)


def failed(section: str, subject: str, error: BaseException) -> Row:
    """The row a scenario leaves when it could not finish: the table keeps the others."""
    why = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error) else ''}"
    return Row(
        section, subject, f"FAILED ({why[:160]})", (verdict("scenario runs", False, why[:80]),)
    )


def render(rows: list[Row], header: str) -> str:
    """Plain text, sections in order; verdicts go on the lines below their row."""
    width = max((len(row.subject) for row in rows), default=10)
    lines = [header, ""]
    section = None
    for row in rows:
        if row.section != section:
            if section is not None:
                lines.append("")
            section = row.section
            lines.append(section)
        lines.append(f"  {row.subject:<{width}}  {row.figures}  [load {row.load:.1f}]")
        for judged in row.verdicts:
            lines.append(f"  {'':<{width}}  -> {judged}")
    passed = [judged.passed for row in rows for judged in row.verdicts]
    lines += ["", f"targets: {sum(passed)} of {len(passed)} pass"]
    return "\n".join(lines)
