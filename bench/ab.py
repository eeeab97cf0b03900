"""``python -m bench.ab --base DIR``: the same unpaid-402 load on two checkouts, in turns.

How "within 5% of before" is measured on a machine whose speed varies from
minute to minute (2 shared cores): both servers run at once on one stack
(anvil, the store), each from its checkout's own ``.venv`` (this one's and
``--base``'s, e.g. a ``git worktree`` of the commit before a change), and are
loaded in turn, A B B A ..., with the same ``wrk`` load. The figures are the
median request rate of each side and the median CPU time its server process
spent per request (from ``/proc``), which the machine's other load changes far
less than the rate.

    git worktree add --detach ../before <commit> && (cd ../before && ./run test --co -q)
    .venv/bin/python -m bench.ab --base ../before [--store sqlite|redis] [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from x402srv.testing import toml
from x402srv.testing.servers import _kill_group, free_port, wait_for_http

from .stack import GAS_KEY_ENV, REPO, _key, started_stack
from .wrk import Load, WrkResult, ensure_wrk, run_wrk

__all__ = ["main"]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the other checkout (with its .venv)")
    parser.add_argument("--store", choices=["sqlite", "redis", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=8, help="runs per side (default 8)")
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds per run")
    args = parser.parse_args(argv)
    sides = {"base": Path(args.base).resolve(), "head": REPO}
    load = Load(connections=50, threads=1, seconds=args.seconds, warmup_seconds=2.0)
    ensure_wrk()
    store = args.store
    with started_stack(with_redis=store == "redis", with_postgres=store == "postgres") as stack:
        processes: dict[str, subprocess.Popen[bytes]] = {}
        urls: dict[str, str] = {}
        try:
            for side, root in sides.items():
                directory = stack.directory / f"ab-{side}"
                directory.mkdir(parents=True, exist_ok=True)
                config = stack.config(store=store, settlement="gas-wallet")
                (directory / "seller.toml").write_text(toml.dumps(config))
                port = free_port()
                with (directory / "server.log").open("ab") as log:
                    processes[side] = subprocess.Popen(
                        [str(root / ".venv" / "bin" / "python"), "-m", "x402srv",
                         "--config", "seller.toml", "--port", str(port)],
                        cwd=directory,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        env={**os.environ, GAS_KEY_ENV: _key(stack.gas_wallet)},
                    )  # fmt: skip
                urls[side] = f"http://127.0.0.1:{port}"
                wait_for_http(f"{urls[side]}/.well-known/agent.json", timeout=60)
            rates: dict[str, list[WrkResult]] = {side: [] for side in sides}
            cpu: dict[str, list[float]] = {side: [] for side in sides}
            for n in range(args.rounds):
                for side in ("base", "head") if n % 2 == 0 else ("head", "base"):
                    before = _cpu_seconds(processes[side].pid)
                    got = run_wrk(
                        f"{urls[side]}/x402/access",
                        load,
                        method="POST",
                        body='{"planId":"hourly"}',
                        headers={"Content-Type": "application/json"},
                        expect_status=402,
                    )
                    # (the warm-up's requests are not counted: an upper bound per request)
                    per = (_cpu_seconds(processes[side].pid) - before) / max(got.requests, 1)
                    rates[side].append(got)
                    cpu[side].append(per * 1e6)
                    print(f"round {n} {side}: {got.summary()}  {per * 1e6:.0f} us CPU/request")
        finally:
            for process in processes.values():
                _kill_group(process)
    median = {side: statistics.median(r.requests_per_second for r in rates[side]) for side in sides}
    used = {side: statistics.median(cpu[side]) for side in sides}
    for side in sides:
        print(f"{store} {side}: median {median[side]:,.0f} req/s, {used[side]:.0f} us CPU/request")
    print(
        f"{store}: head/base {median['head'] / median['base']:.3f}x req/s, "
        f"{used['head'] / used['base']:.3f}x CPU per request"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
