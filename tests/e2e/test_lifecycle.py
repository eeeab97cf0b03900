"""Start and stop, as a seller runs it: ``x402srv --config FILE`` as a process, real signals.

Every server here is the real command on the session's anvil, settling through
the session's facilitator (the official SDK's code, in its own process), with
sqlite. Regression tests for the start and stop of issue 23:

- ``test_a_stop_signal_ends_the_server_within_2s``: SIGTERM and SIGINT stop
  every layout (one or four workers, with and without the console's own
  listener) within 2 s, every process of it. Before, with ``[admin] port`` set
  the server never stopped and spun at 100% CPU; with several workers SIGTERM
  took longer than 30 s.
- ``test_a_request_in_flight_finishes_during_the_stop``: a purchase whose
  settlement is held at the facilitator when SIGTERM arrives gets its grant,
  and the server exits within 2 s of answering, although the buyer keeps its
  keep-alive connection open.
- ``test_a_listener_that_cannot_bind_is_one_line_naming_its_key``: a port in
  use (public or admin) or an address of another machine: exit 2, one line
  naming the key, nothing served. Before: a traceback and exit 1 for the public
  port, and a server without its console for the admin port.
- ``test_a_dead_worker_is_replaced_and_no_worker_outlives_the_main_process``: a
  worker killed while serving is replaced; when the main process is killed, its
  workers stop instead of holding the port.
- ``test_check_*``: ``x402srv check`` probes every settler and RPC (warnings;
  errors with ``--strict``). Before, it said "config OK" with both unreachable.

Run with ``-s`` to see the measured stop times.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.support.networks import nothing_listening, wait_for_file
from tests.support.seller import settlement_table
from x402srv.config.lines import key_lines
from x402srv.devchain import Devchain
from x402srv.testing import toml
from x402srv.testing.buyers import paying_client
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.launcher import Launched
from x402srv.testing.servers import ServerProcess, free_port, seller_config

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

#: What a stop may take, from the signal to the exit of the last process.
STOP_BUDGET_SECONDS = 2.0
ADMIN_TOKEN = "lifecycle-admin-token-" + "t" * 24
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


def config(
    devchain: Devchain,
    facilitator_url: str,
    *,
    admin_port: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    document = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=Account.create().address,
        store={"backend": "sqlite", "path": "x402srv.db"},
        settlement={"strategy": "facilitator", "facilitator_url": facilitator_url},
        **overrides,
    )
    if admin_port is not None:
        document["admin"] = {"token": ADMIN_TOKEN, "port": admin_port}
    return document


def serving(server: ServerProcess, workers: int, timeout: float = 90.0) -> None:
    """Every worker serves: each logs Sanic's "Worker ready" (so does a server of before)."""
    deadline = time.monotonic() + timeout
    while server.logs().count("Worker ready [") < workers:
        assert time.monotonic() < deadline, server.logs()[-4000:]
        time.sleep(0.05)


def group_alive(pid: int) -> bool:
    """Whether any process of the server's process group (its workers) is left."""
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stopped_within(process: subprocess.Popen[bytes] | Launched, seconds: float) -> float | None:
    """Seconds until the process and its whole group ended, or None if not in ``seconds``."""
    start = time.monotonic()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None
    while group_alive(process.pid):
        if time.monotonic() - start > seconds:
            return None
        time.sleep(0.01)
    return time.monotonic() - start


@pytest.fixture
def servers() -> Iterator[list[ServerProcess]]:
    """Servers a test starts; whatever is left of them is killed (by process group) after."""
    started: list[ServerProcess] = []
    yield started
    for server in started:
        server.kill()


# ---------------------------------------------------------------------- stop


@pytest.mark.parametrize("signame", SIGNALS)
@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("listeners", ["public", "public+admin"])
def test_a_stop_signal_ends_the_server_within_2s(
    listeners: str,
    workers: int,
    signame: str,
    devchain: Devchain,
    facilitator_url: str,
    servers: list[ServerProcess],
    tmp_path: Path,
) -> None:
    admin_port = free_port() if listeners == "public+admin" else None
    document = config(devchain, facilitator_url, admin_port=admin_port)
    server = ServerProcess(document, tmp_path, workers=workers)
    servers.append(server)
    server.start(timeout=90)
    serving(server, workers)
    assert httpx.post(server.access_url, json={}).status_code == 402
    if admin_port is not None:  # the console answers on its own listener, and only there
        console = f"http://127.0.0.1:{admin_port}/admin/api/overview"
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        assert httpx.get(console, headers=headers).status_code == 200
        assert httpx.get(f"{server.url}/admin/api/overview", headers=headers).status_code == 404
    process = server.process
    assert process is not None

    process.send_signal(SIGNALS[signame])
    took = stopped_within(process, STOP_BUDGET_SECONDS)

    print(f"\nstop: {listeners}, {workers} worker(s), {signame}: {took} s")
    assert took is not None, f"still running {STOP_BUDGET_SECONDS} s after {signame}"
    assert process.returncode == 0, server.logs()[-4000:]
    assert "Traceback" not in server.logs()


#: Serves like ``x402srv --config FILE --port N``, and signals itself in the last start-up step.
SIGNAL_AT_START = """
import os, signal, sys
from x402srv.server import worker

made = worker.create_app

def create_app(config):
    app = made(config)

    async def stop_me(app):  # the moment a deploy's SIGTERM can meet: "Worker ready"
        os.kill(os.getpid(), getattr(signal, sys.argv[3]))

    app.register_listener(stop_me, "after_server_start", priority=-1_000_000)
    return app

worker.create_app = create_app
from x402srv.cli.main import main
sys.exit(main(["--config", sys.argv[1], "--port", sys.argv[2]]))
"""


@pytest.mark.parametrize("signame", SIGNALS)
def test_a_stop_signal_as_the_server_finishes_starting_is_not_lost(
    signame: str, devchain: Devchain, facilitator_url: str, tmp_path: Path
) -> None:
    """Sanic stopped its loop at once, and start-up's last step swallowed that stop.

    The server then served on, deaf to the signal, until a kill: the signal
    comes here from the app's own last start-up listener, exactly that moment.
    """
    path = tmp_path / "seller.toml"
    path.write_text(toml.dumps(config(devchain, facilitator_url)))
    process = subprocess.Popen(
        [sys.executable, "-c", SIGNAL_AT_START, str(path), str(free_port()), signame],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # still serving: the bug; the test must not leave it
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, output.decode(errors="replace")[-3000:]
    assert b"Traceback" not in output


@pytest.mark.parametrize("workers", [1, 4])
def test_a_request_in_flight_finishes_during_the_stop(
    workers: int,
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    servers: list[ServerProcess],
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    held = facilitator("settle-gate", gate=gate)  # settles when the test says so
    document = config(devchain, held.url, admin_port=free_port())
    server = ServerProcess(document, tmp_path / "seller", workers=workers)
    servers.append(server)
    server.start(timeout=90)
    serving(server, workers)
    process = server.process
    assert process is not None
    buyer = devchain.new_account()

    async def buy_while_stopping() -> tuple[httpx.Response, float | None]:
        client, _ = paying_client(buyer)
        async with client:  # keep-alive: the connection stays open after the answer
            purchase = asyncio.create_task(
                client.post(server.access_url, json={"planId": "hourly"})
            )
            await asyncio.to_thread(wait_for_file, gate / "arrived-1")
            process.send_signal(signal.SIGTERM)  # the settlement is in flight
            (gate / "go-1").touch()
            answer = await purchase
            took = await asyncio.to_thread(stopped_within, process, STOP_BUDGET_SECONDS)
        return answer, took

    answer, took = asyncio.run(buy_while_stopping())

    assert answer.status_code == 200, answer.text + server.logs()[-4000:]
    assert answer.json()["accessToken"]
    print(f"\nstop after the answer, {workers} worker(s): {took} s")
    assert took is not None, f"still running {STOP_BUDGET_SECONDS} s after its last answer"
    assert process.returncode == 0, server.logs()[-4000:]


def test_a_dead_worker_is_replaced_and_no_worker_outlives_the_main_process(
    devchain: Devchain, facilitator_url: str, servers: list[ServerProcess], tmp_path: Path
) -> None:
    """SIGKILL (nothing else makes a real crash) of a worker, then of the main process."""
    server = ServerProcess(config(devchain, facilitator_url), tmp_path, workers=2)
    servers.append(server)
    server.start(timeout=90)
    serving(server, 2)
    process = server.process
    assert process is not None
    first = int(re.findall(r"Worker ready \[(\d+)\]", server.logs())[0])

    os.kill(first, signal.SIGKILL)
    serving(server, 3)  # its replacement serves
    assert "died (code -9): starting another" in server.logs()
    assert httpx.post(server.access_url, json={}).status_code == 402

    process.kill()  # the main process only: its workers stop (gracefully) on their own
    assert stopped_within(process, STOP_BUDGET_SECONDS) is not None, "orphaned workers"


# ---------------------------------------------------------------------- bind


@pytest.fixture
def occupied() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def x402srv(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "x402srv", *args, "--config", "seller.toml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("key", ["server.port", "admin.port", "server.host"])
@pytest.mark.parametrize("workers", [1, 4])
def test_a_listener_that_cannot_bind_is_one_line_naming_its_key(
    key: str,
    workers: int,
    occupied: int,
    devchain: Devchain,
    facilitator_url: str,
    tmp_path: Path,
) -> None:
    port, admin_port, host = free_port(), free_port(), "127.0.0.1"
    if key == "server.port":
        port, expected = occupied, f"127.0.0.1:{occupied} is already in use"
    elif key == "admin.port":
        admin_port, expected = occupied, f"127.0.0.1:{occupied} is already in use"
    else:
        host = "192.0.2.1"  # TEST-NET-1: never an address of this machine
        expected = "192.0.2.1 is not an address of this machine"
    document = config(
        devchain,
        facilitator_url,
        admin_port=admin_port,
        server={"host": host, "port": port, "workers": workers},
    )
    (tmp_path / "seller.toml").write_text(toml.dumps(document))

    result = x402srv(tmp_path)

    assert result.returncode == 2
    # (the line of the key in seller.toml, as a compiler names one: issue 30)
    line = key_lines(toml.dumps(document))[key]
    assert result.stderr.splitlines() == [
        f"x402srv: configuration error: seller.toml:{line}: {key}: {expected}"
    ]
    assert result.stdout == ""
    assert not (tmp_path / "x402srv.db").exists()  # nothing was opened, let alone served


# ---------------------------------------------------------------------- check


def check(directory: Path, document: dict[str, Any], *args: str, env: dict[str, str] | None = None):
    (directory / "seller.toml").write_text(toml.dumps(document))
    return subprocess.run(
        [sys.executable, "-m", "x402srv", "check", "--config", "seller.toml", *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("strategy", ["facilitator", "gas-wallet"])
def test_check_probes_a_reachable_settler_and_rpc_quietly(
    strategy: str, devchain: Devchain, facilitator_url: str, tmp_path: Path
) -> None:
    env: dict[str, str] = {}
    document = config(devchain, facilitator_url)
    if strategy == "gas-wallet":
        document["settlement"] = settlement_table("gas-wallet", devchain, None, env)

    result = check(tmp_path, document, "--strict", env=env)

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == "config OK"
    assert "warning" not in result.stderr and "error" not in result.stderr


def test_check_warns_about_an_unreachable_facilitator_and_rpc(
    devchain: Devchain, tmp_path: Path
) -> None:
    closed = nothing_listening()
    document = config(devchain, closed)
    document["network"]["rpc_url"] = closed
    shown = closed  # no path or credentials to redact in it

    warned = check(tmp_path, document)
    strict = check(tmp_path, document, "--strict")

    expected = [
        f"settlement: facilitator {shown} #1 on {devchain.network} is not ready: "
        "facilitator unreachable (ConnectError)",
        f"network.rpc_url: the RPC of {devchain.network} ({shown}) cannot be reached "
        "(eth_chainId: RPC request failed (ConnectError))",
    ]
    assert warned.returncode == 0
    assert warned.stderr.splitlines() == [
        *(f"warning: {line}" for line in expected),
        "config OK (2 warnings: see above)",
    ]
    assert strict.returncode == 1  # nothing answered: not the config's fault
    assert strict.stderr.splitlines() == [
        *(f"error: {line}" for line in expected),
        "x402srv: 2 probes failed",
    ]


def test_check_errs_on_an_rpc_of_another_chain(
    devchain: Devchain, facilitator_url: str, tmp_path: Path
) -> None:
    """A config that names a chain its RPC does not serve: exit 2 with ``--strict``."""
    document = config(devchain, facilitator_url)
    document["seller"]["network"] = "eip155:4242"  # anvil is 31337; the facilitator serves it only

    warned = check(tmp_path, document)
    strict = check(tmp_path, document, "--strict")

    assert warned.returncode == 0
    assert strict.returncode == 2
    lines = strict.stderr.splitlines()
    assert lines[-1] == "x402srv: 2 probes failed"
    assert any(
        line.startswith("error: settlement.facilitator_url: the facilitator at ")
        and "does not support x402 v2 exact on eip155:4242" in line
        and line.endswith("(serving refuses to start)")
        for line in lines
    ), lines
    assert (
        f"error: network.rpc_url: the RPC of eip155:4242 ({devchain.rpc_url}) serves chain "
        f"{devchain.chain_id}, not 4242"
    ) in lines
