"""The bench reads wrk's report; a misread number would be a wrong table."""

from __future__ import annotations

import pytest

from bench.wrk import parse

REPORT = """Running 10s test @ http://127.0.0.1:40001/x402/access
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     7.70ms    2.04ms  35.32ms   80.12%
    Req/Sec     5.48k   412.50     6.01k    81.00%
  Latency Distribution
     50%    7.70ms
     75%    8.51ms
     90%    9.62ms
     99%   21.10ms
  54771 requests in 10.00s, 118.20MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 54771
Requests/sec:   5477.02
Transfer/sec:     11.82MB
"""


def test_a_402_run() -> None:
    result = parse(REPORT, expect_status=402)
    assert (result.requests_per_second, result.p50_ms, result.p99_ms) == (5477.02, 7.7, 21.1)
    assert (result.requests, result.errors, result.statuses_ok) == (54771, 3, True)


def test_units_and_a_200_run_with_stray_errors() -> None:
    text = REPORT.replace("7.70ms", "770.00us").replace("21.10ms", "1.20s")
    result = parse(text, expect_status=200)
    assert (result.p50_ms, result.p99_ms) == (0.77, 1200.0)
    assert not result.statuses_ok  # every response was a non-2xx


def test_unreadable_output_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        parse("wrk: connection refused", expect_status=200)
