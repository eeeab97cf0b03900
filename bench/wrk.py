"""The load generator: ``wrk`` at a fixed concurrency, the same for every server.

``wrk`` (C, one thread per core, an event loop of its own) costs the machine far
less per request than any Python driver would, so the servers, not the load
generator, set the numbers. When it is missing it is installed with
``apt-get install -y wrk`` (Debian; the bench says so when it does).
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx

from .tools import ensure_binary

__all__ = ["Load", "WrkResult", "ensure_wrk", "run_wrk"]

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass(frozen=True)
class Load:
    """How hard and how long: the same for every server compared."""

    connections: int
    threads: int
    seconds: float
    warmup_seconds: float


@dataclass(frozen=True)
class WrkResult:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int  # connect/read/write/timeout errors
    statuses_ok: bool  # every response had the expected status class

    def summary(self) -> str:
        text = (
            f"{self.requests_per_second:8,.0f} req/s  p50 {self.p50_ms:5.1f} ms  "
            f"p99 {self.p99_ms:5.1f} ms"
        )
        if self.errors or not self.statuses_ok:
            text += f"  (socket errors {self.errors}, expected statuses: {self.statuses_ok})"
        return text


def ensure_wrk() -> str:
    """The ``wrk`` binary; installs the Debian package when it is missing."""
    return ensure_binary("wrk", "wrk")


def _script(method: str, body: str | None, headers: dict[str, str]) -> str:
    lines = [f'wrk.method = "{method}"']
    if body is not None:
        lines.append(f"wrk.body = [[{body}]]")
    for name, value in headers.items():
        lines.append(f'wrk.headers["{name}"] = [[{value}]]')
    return "\n".join(lines) + "\n"


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unreadable wrk latency {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def parse(output: str, expect_status: int) -> WrkResult:
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    total = re.search(r"(\d+) requests in", output)
    if not (rate and p50 and p99 and total):
        raise RuntimeError(f"unexpected wrk output:\n{output}")
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    bad = int(non_2xx[1]) if non_2xx else 0
    requests = int(total[1])
    # wrk only counts non-2xx/3xx: a 402 run must have all of them, a 200 run none.
    ok = bad == requests if expect_status >= 400 else bad == 0
    return WrkResult(float(rate[1]), _ms(p50[1]), _ms(p99[1]), requests, errors, ok)


def run_wrk(
    url: str,
    load: Load,
    *,
    method: str = "GET",
    body: str | None = None,
    headers: dict[str, str] | None = None,
    expect_status: int = 200,
) -> WrkResult:
    """Warm up, then measure ``load.seconds`` of requests at ``load.connections``.

    One request is sent first with httpx: wrk only counts non-2xx/3xx answers,
    so this is where a wrong status (a 500 instead of the 402) is caught.
    """
    binary = ensure_wrk()
    probe = httpx.request(method, url, content=body, headers=headers, timeout=10)
    if probe.status_code != expect_status:
        raise RuntimeError(f"{method} {url} answered {probe.status_code}, not {expect_status}")
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = Path(tmp) / "request.lua"
        script.write_text(_script(method, body, headers or {}))
        base = [binary, f"-t{load.threads}", f"-c{load.connections}", "-s", str(script)]
        if load.warmup_seconds > 0:
            _wrk([*base, f"-d{_whole(load.warmup_seconds)}s", url])
        done = _wrk([*base, f"-d{_whole(load.seconds)}s", "--latency", url])
    return parse(done.stdout, expect_status)


def _whole(seconds: float) -> int:
    """wrk takes whole seconds only: ``-d3.33333s`` is an error, not 3.3 s of load."""
    return max(1, math.ceil(seconds))


def _wrk(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run wrk; a failure says what wrk said (the bench prints it in the scenario's row)."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"wrk exited {done.returncode}: {said[-1] if said else 'no output'}")
    return done
