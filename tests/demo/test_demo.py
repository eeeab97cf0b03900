"""``x402srv demo`` for real: ``python -m x402srv demo`` in a subprocess, as a user runs it.

The demo stops anvil when it ends, so its own output is the evidence: the steps,
the transaction hash, the protected answer and the balances it read from the
chain. Every PID it prints must be gone afterwards: after a normal run, after an
interrupt half-way, and after ``--keep`` once the printed stop command ran.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

PID = re.compile(r"\bpid (\d+)")
TX_HASH = re.compile(r"txHash +(0x[0-9a-f]{64})")
STOP = re.compile(r"^  kill ([\d ]+) && rm -rf (\S+)$", re.MULTILINE)


def demo(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "x402srv", "demo", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for an adoptive parent to reap it (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def assert_gone(pids: set[int], within: float = 10) -> None:
    deadline = time.monotonic() + within
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)]


def test_demo_buys_calls_and_stops_everything() -> None:
    result = demo()
    out = result.stdout
    assert result.returncode == 0, out + result.stderr

    # the steps, in order
    steps = ["1. A local chain", "2. The seller", '3. Buy plan "hourly"', "4. Call the seller"]
    steps += ["5. Lost the token?", "6. Balances"]
    positions = [out.index(step) for step in steps]
    assert positions == sorted(positions)
    # the 402 offer, the signed payment, the grant and its on-chain transfer
    assert "<- 402 Payment Required: challenge" in out
    assert "offer  plan hourly: 0.10 USDC = 100000 units of token" in out
    assert "transferWithAuthorization from 0x3C44…93BC to 0x90F7…b906, value 100000," in out
    tx_hash = TX_HASH.search(out)
    assert tx_hash is not None
    assert re.search(r"on-chain +block \d+: Transfer 0x3C44…93BC -> 0x90F7…b906, 100000", out)
    # the guard refused without the token and answered with it
    assert "-> GET /weather without a token\n   <- 401 INVALID_TOKEN" in out
    assert '<- 200 {"city": "Berlin", "forecast": "sunny"' in out
    assert '"plan": "hourly"' in out
    assert "nothing paid twice" in out
    # balances read from the chain: the seller got exactly the price
    assert re.search(r"buyer +10\.00 -> +9\.90 +\(-0\.10\)", out)
    assert re.search(r"seller +0\.00 -> +0\.10 +\(\+0\.10\)", out)

    # no secret on screen: the token only shortened, no JWT secret or key file content
    assert not re.search(r"eyJ[\w-]{20,}\.", out)
    assert "5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a" not in out

    # everything it started is stopped, and it said so
    pids = {int(pid) for pid in PID.findall(out)}
    assert len(pids) == 3
    last = out.strip().splitlines()[-1]
    assert last.startswith("stopped seller API (pid") and "anvil (pid" in last
    assert_gone(pids)
    temp = re.search(r"removed (\S+)$", last)
    assert temp is not None and not Path(temp.group(1)).exists()


def test_interrupted_demo_stops_what_it_started() -> None:
    """Ctrl-C half-way (once both servers run): nothing it started outlives it.

    Like a terminal's Ctrl-C, SIGINT goes to the demo's whole process group (the
    demo and anvil; the servers run in sessions of their own).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "x402srv", "demo"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    seen: list[str] = []
    for line in process.stdout:
        seen.append(line)
        if line.lstrip().startswith("seller API"):
            break
    pids = {int(pid) for pid in PID.findall("".join(seen))}
    assert len(pids) == 3, "".join(seen)
    os.killpg(process.pid, signal.SIGINT)
    rest, _ = process.communicate(timeout=30)
    assert process.returncode == 130, rest
    assert "interrupted" in rest and "stopped seller API" in rest
    assert_gone(pids)


def test_keep_leaves_a_working_stack_and_the_printed_command_stops_it() -> None:
    result = demo("--keep")
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    stop = STOP.search(out)
    assert stop is not None, out
    pids = {int(pid) for pid in stop.group(1).split()}
    directory = Path(stop.group(2))
    try:
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        # the printed curl targets answer: discovery offers both plans
        access = re.search(r"curl -si -X POST (\S+) ", out)
        assert access is not None
        offer = httpx.post(access.group(1), json={})
        assert offer.status_code == 402
        assert [a["extra"]["planId"] for a in offer.json()["accepts"]] == ["hourly", "daily"]
        # the demo's grant again by its requestId, and it opens the seller's API
        request_id = re.search(r'"requestId": "([0-9a-f-]{36})"', out)
        assert request_id is not None
        grant = httpx.post(access.group(1), json={"planId": "hourly", "requestId": request_id[1]})
        assert grant.status_code == 200
        api = re.search(r"curl -s (http://127\.0\.0\.1:\d+/weather)", out)
        assert api is not None
        bearer = {"Authorization": f"Bearer {grant.json()['accessToken']}"}
        assert httpx.get(api.group(1), headers=bearer).status_code == 200
    finally:
        stopped = subprocess.run(["sh", "-c", stop.group(0).strip()], check=False)
        for pid in pids:  # only if the printed command failed: never leave them behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert stopped.returncode == 0
    assert_gone(pids)
    assert not directory.exists()


def test_demo_is_a_listed_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "x402srv", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "demo" in result.stdout
