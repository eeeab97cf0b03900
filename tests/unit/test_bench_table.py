"""The bench's table: spreads over runs, verdicts, and rows a failed scenario leaves."""

from __future__ import annotations

import subprocess

import pytest

from bench.table import Row, Spread, failed, ms, render, times, verdict


def test_a_spread_is_judged_on_its_median_and_shows_min_and_max() -> None:
    spread = Spread.of([3.0, 1.0, 2.0])
    assert (spread.median, spread.low, spread.high) == (2.0, 1.0, 3.0)
    assert spread.show(times) == "2.00x (1.00x-3.00x)"
    assert Spread.of([4.25]).show(ms) == "4.2"  # one run: no range to show


def test_a_spread_needs_a_run() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        Spread.of([])


def test_a_failed_scenario_leaves_a_missed_row_and_the_others_keep_theirs() -> None:
    error = subprocess.CalledProcessError(1, ["wrk", "-t1"])
    rows = [
        Row("A", "kept", "1,000 req/s", (verdict(">= 2x", True, "2.10x"),), load=1.5),
        failed("metering", "scenario metering", error),
    ]
    text = render(rows, "header")
    assert "1,000 req/s  [load 1.5]" in text
    assert "FAILED (CalledProcessError: Command '['wrk', '-t1']' returned non-zero" in text
    assert "-> PASS 2.10x (target >= 2x)" in text
    assert "-> MISS" in text
    assert text.endswith("targets: 1 of 2 pass")
