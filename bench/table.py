"""The printed table: one row per figure, with what was measured and the target it meets."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Row", "Verdict", "render", "verdict"]


@dataclass(frozen=True)
class Verdict:
    target: str
    passed: bool
    detail: str  # the ratio or number the target is judged on

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.detail} (target {self.target})"


def verdict(target: str, passed: bool, detail: str) -> Verdict:
    return Verdict(target, passed, detail)


@dataclass(frozen=True)
class Row:
    section: str
    subject: str
    figures: str
    verdicts: tuple[Verdict, ...] = ()


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
        lines.append(f"  {row.subject:<{width}}  {row.figures}")
        for judged in row.verdicts:
            lines.append(f"  {'':<{width}}  -> {judged}")
    passed = [judged.passed for row in rows for judged in row.verdicts]
    lines += ["", f"targets: {sum(passed)} of {len(passed)} pass"]
    return "\n".join(lines)
