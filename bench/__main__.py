"""``python -m bench``: x402srv against the official x402 middleware, on this machine.

    .venv/bin/python -m bench [--quick] [--duration S] [--connections C] [--runs N]
        [--purchases N] [--only NAME,...]
    ./run bench [same options]      (installs everything first, then runs this)

Starts anvil with our token, a local facilitator (official SDK), Redis,
PostgreSQL, and the servers as real processes; runs every scenario with the same load generator
(``wrk``) and prints one table with the machine's core count, what each figure
measured, and every target with PASS/MISS. Progress goes to stderr, the table
to stdout. Everything started is stopped by PID on the way out.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from collections.abc import Callable

from .scenarios import (
    calls,
    challenge,
    console,
    failover,
    guard,
    mcp,
    mcp_paid,
    metering,
    paid,
    purchase,
    reconciler,
    roundtrips,
    stream,
)
from .stack import started_stack
from .table import Row, failed, load_average, render
from .wrk import Load, ensure_wrk


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _load_averages() -> str:
    try:
        return ", ".join(f"{n:.1f}" for n in os.getloadavg())
    except OSError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--duration", type=float, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, default=50, help="wrk connections")
    parser.add_argument(
        "--records", type=int, help="records of the reconciler pass (default 100000)"
    )
    parser.add_argument(
        "--runs", type=int, help="runs per measure, for its spread (default 3; --quick 2)"
    )
    parser.add_argument(
        "--purchases",
        type=int,
        help="paid purchases in a row per server and run (default 60; --quick 20)",
    )
    parser.add_argument(
        "--only",
        help=f"run only these scenarios (comma-separated: {', '.join(SCENARIOS)})",
    )
    return parser


SCENARIOS = (
    "challenge",
    "paid",
    "purchase",
    "reconciler",
    "guard",
    "metering",
    "mcp",
    "mcp-paid",
    "stream",
    "calls",
    "roundtrips",
    "failover",
    "console",
)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    seconds = args.duration or (3.0 if args.quick else 10.0)
    load = Load(
        connections=args.connections,
        threads=1,
        seconds=seconds,
        warmup_seconds=1.0 if args.quick else 2.0,
    )
    samples, each = (10, 2) if args.quick else (30, 5)
    records = args.records or (10_000 if args.quick else reconciler.RECORDS)
    cores = os.cpu_count() or 1
    ensure_wrk()
    started = time.monotonic()
    started_load = _load_averages()
    paid_samples = args.purchases or (20 if args.quick else 60)
    rows: list[Row] = []

    def step(name: str) -> None:
        print(f"bench [{time.monotonic() - started:5.0f} s] {name}", file=sys.stderr, flush=True)

    chosen = set(args.only.split(",")) if args.only else set(SCENARIOS)
    unknown = chosen - set(SCENARIOS)
    if unknown:
        print(f"unknown scenarios: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if "reconciler" in chosen:
        chosen.add("challenge")  # the reconciler's figure is judged against its rate
    args.runs = args.runs or (2 if args.quick else 3)
    # (these run on sqlite alone)
    stores = not chosen <= {"failover", "guard", "mcp-paid", "stream"}
    with started_stack(with_redis=stores, with_postgres=stores) as stack:
        if stores and stack.redis_url is None:
            step("redis-server not found: the Redis rows are skipped")
        if stores and stack.postgres_dsn is None:
            step("PostgreSQL not found: the PostgreSQL rows are skipped")
        official_rate: list[float] = []

        def challenges() -> list[Row]:
            figures, found = challenge.run(stack, load, args.runs)
            official_rate.append(figures.official.requests_per_second)
            return found

        def reconciled() -> list[Row]:
            if not official_rate:
                raise RuntimeError("the challenge scenario, its reference, did not finish")
            return reconciler.run(stack, official_rate[0], records)

        plan: list[tuple[str, str, Callable[[], list[Row]]]] = [
            (
                "challenge",
                f"unpaid 402s (official; {', '.join(stack.stores)}; {args.runs} runs each)",
                challenges,
            ),
            (
                "paid",
                f"paid purchases in a row, {paid_samples} per server per run, {args.runs} runs",
                lambda: paid.run(stack, paid_samples, args.runs),
            ),
            (
                "purchase",
                "paid purchases (official; gas wallet on every store, facilitator on sqlite)",
                lambda: purchase.run(stack, samples, each)[1],
            ),
            ("reconciler", f"reconciler pass over {records:,} records per store", reconciled),
            (
                "guard",
                f"guarded route, {args.runs} runs",
                lambda: guard.run(stack, load, args.runs),
            ),
            ("metering", "metered vs unmetered gateway calls", lambda: metering.run(stack, load)),
            ("mcp", "credit-metered MCP tool calls vs direct", lambda: mcp.run(stack, load)),
            (
                "mcp-paid",
                f"paid MCP tool calls: x402srv vs the SDK's wrapper, {args.runs} runs",
                lambda: mcp_paid.run(stack, load, samples, args.runs),
            ),
            (
                "stream",
                f"metered vs unmetered SSE streams through the gateway, {args.runs} runs",
                lambda: stream.run(stack, load, samples, args.runs),
            ),
            ("calls", "100 calls: pay once vs pay every call", lambda: calls.run(stack)),
            ("roundtrips", "store round trips", lambda: roundtrips.run(stack)),
            (
                "failover",
                "a purchase past a failing first facilitator (refused, 500)",
                lambda: failover.run(stack, samples * 3),  # small differences: more samples
            ),
            (
                "console",
                f"the console's admin API on {records:,} purchases per store",
                lambda: console.run(stack, records),
            ),
        ]
        for name, label, scenario in plan:
            if name not in chosen:
                continue
            step(f"{label}  [load {load_average():.1f}]")
            try:
                rows += scenario()
            except Exception as exc:  # one scenario failing must not lose the others' rows
                step(f"{name} failed: {type(exc).__name__}: {exc}")
                rows.append(failed(name, f"scenario {name}", exc))
    header = (
        f"x402srv bench  {datetime.date.today()}  {cores} cores ({_cpu_model()}), "
        f"Python {platform.python_version()}\n"
        f"load: wrk -t{load.threads} -c{load.connections}, {load.seconds:g} s per run after "
        f"{load.warmup_seconds:g} s warm-up, on the same machine as the servers; "
        f"N workers = {cores}\n"
        f"purchases: {samples} one at a time, then 20 buyers x {each} at once; "
        f"every spread is median (min-max) over {args.runs} runs\n"
        f"load average (1, 5, 15 min) at the start {started_load}, at the end "
        f"{_load_averages()}; each row ends with the 1-minute figure when it was measured"
    )
    print(render(rows, header))
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
