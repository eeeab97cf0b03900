"""``python -m bench``: x402srv against the official x402 middleware, on this machine.

    .venv/bin/python -m bench [--quick] [--duration S] [--connections C] [--only NAME,...]
    ./run bench [same options]      (installs everything first, then runs this)

Starts anvil with our token, a local facilitator (official SDK), Redis,
PostgreSQL, and the servers as real processes; runs every scenario with the same load generator
(``wrk``) and prints one table with the machine's core count, what each figure
measured, and every target with PASS/FAIL. Progress goes to stderr, the table
to stdout. Everything started is stopped by PID on the way out.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

from .scenarios import (
    calls,
    challenge,
    console,
    failover,
    guard,
    metering,
    purchase,
    reconciler,
    roundtrips,
)
from .stack import started_stack
from .table import Row, render
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    parser.add_argument("--duration", type=float, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, default=50, help="wrk connections")
    parser.add_argument(
        "--records", type=int, help="records of the reconciler pass (default 100000)"
    )
    parser.add_argument(
        "--only",
        help=f"run only these scenarios (comma-separated: {', '.join(SCENARIOS)})",
    )
    return parser


SCENARIOS = (
    "challenge",
    "purchase",
    "reconciler",
    "guard",
    "metering",
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
    stores = not chosen <= {"failover", "guard"}  # those two run on sqlite alone
    with started_stack(with_redis=stores, with_postgres=stores) as stack:
        if stack.redis_url is None:
            step("redis-server not found: the Redis rows are skipped")
        if stack.postgres_dsn is None:
            step("PostgreSQL not found: the PostgreSQL rows are skipped")
        if "challenge" in chosen:
            step(f"challenge issuance (official; {', '.join(stack.stores)}; 1 and N workers)")
            figures, found = challenge.run(stack, load, cores)
            rows += found
        if "purchase" in chosen:
            step("paid purchases (official; gas wallet on every store, facilitator on sqlite)")
            rows += purchase.run(stack, samples, each)[1]
        if "reconciler" in chosen:
            step(f"reconciler pass over {records:,} records per store")
            rows += reconciler.run(stack, figures.official.requests_per_second, records)
        if "guard" in chosen:
            step("guarded route")
            rows += guard.run(stack, load)
        if "metering" in chosen:
            step("metered vs unmetered gateway calls (sqlite, redis)")
            rows += metering.run(stack, load)
        if "calls" in chosen:
            step("100 calls: pay once vs pay every call")
            rows += calls.run(stack)
        if "roundtrips" in chosen:
            step("store round trips")
            rows += roundtrips.run(stack)
        if "failover" in chosen:
            step("a purchase past a failing first facilitator (refused, 500)")
            rows += failover.run(stack, samples * 3)  # small differences: more samples
        if "console" in chosen:
            step(f"the console's admin API on {records:,} purchases per store")
            rows += console.run(stack, records)
    header = (
        f"x402srv bench  {datetime.date.today()}  {cores} cores ({_cpu_model()}), "
        f"Python {platform.python_version()}\n"
        f"load: wrk -t{load.threads} -c{load.connections}, {load.seconds:g} s per run after "
        f"{load.warmup_seconds:g} s warm-up, on the same machine as the servers; "
        f"N workers = {cores}\n"
        f"purchases: {samples} one at a time, then 20 buyers x {each} at once"
    )
    print(render(rows, header))
    step("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
