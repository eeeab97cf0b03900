"""The ``x402srv`` command (docs/cli.md), run for real: ``python -m x402srv`` in a subprocess.

Exit codes: 0 ok, 2 bad usage or config. ``check`` output is grepped for the
secret values it was given. One real ``serve`` of ``config.example.toml``
answers the card, the offers, the A2A stub and the JWKS route, and stops on
SIGTERM (by its PID).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pty
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.paths import REPO
from x402srv.testing import launcher
from x402srv.testing.servers import free_port, wait_for_http

EXAMPLE = REPO / "config.example.toml"
DEV_SECRET = "dev-secret-for-unit-tests-" + "d" * 32

FILE_SECRET = "cli-file-secret-" + "f1" * 16
ENV_SECRET = "cli-env-secret-" + "e2" * 16
URL_PASSWORD = "clipassword9931"
URL_KEY = "clikey1177"
ENV_NAME = "X402SRV_UNIT_CLI_FAC_TOKEN"


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return launcher.run(args, cwd=cwd, env={**os.environ, **(env or {})}, timeout=60)


@pytest.fixture
def example_dir(tmp_path: Path) -> Path:
    """config.example.toml copied beside the dev secret it reads."""
    shutil.copy(EXAMPLE, tmp_path / "config.example.toml")
    (tmp_path / ".x402srv-dev-secret").write_text(DEV_SECRET + "\n")
    return tmp_path


def seller_toml(extra: str = "") -> str:
    return (
        "[seller]\n"
        'agent_name = "Weather Oracle"\nagent_description = "Paid hourly weather data"\n'
        'agent_url = "https://api.example.com"\nprovider_name = "Example Inc"\n'
        'provider_url = "https://example.com"\n'
        'wallet_address = "0x209693bc6afc0c5328ba36faf03c514ef312287c"\n'
        'network = "base-sepolia"\n'
        '[[plans]]\nplan_id = "hourly"\nunit_amount = "$0.10"\ndescription = "One hour"\n' + extra
    )


# ---------------------------------------------------------------------- check


def test_check_prints_the_resolved_config_without_secrets(tmp_path: Path) -> None:
    (tmp_path / "jwt.secret").write_text(FILE_SECRET)
    (tmp_path / "seller.toml").write_text(
        seller_toml(
            "[settlement]\n"
            f'facilitator_url = "https://user:{URL_PASSWORD}@fac.example.com/v1?key={URL_KEY}"\n'
            f'facilitator_auth = {{ env = "{ENV_NAME}" }}\n'
            f'rpc_url = "https://base-sepolia.example.com/v2/{URL_KEY}"\n'
            '[credentials]\nsecret = { file = "jwt.secret" }\n'
        )
    )
    result = run("check", "--config", "seller.toml", cwd=tmp_path, env={ENV_NAME: ENV_SECRET})
    assert result.returncode == 0, result.stderr
    for secret in (FILE_SECRET, ENV_SECRET, URL_PASSWORD, URL_KEY):
        assert secret not in result.stdout
        assert secret not in result.stderr
    printed = json.loads(result.stdout)
    assert printed["credentials"]["secret"] == "<secret: file jwt.secret>"
    assert printed["settlement"]["facilitator_auth"] == f"<secret: env {ENV_NAME}>"
    assert printed["settlement"]["strategy"] == "facilitator"
    assert printed["seller"]["wallet_address"] == "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    assert printed["resolved"]["network"]["caip2"] == "eip155:84532"
    assert (
        printed["resolved"]["network"]["rpc_url"] == "https://base-sepolia.example.com/<redacted>"
    )
    assert printed["resolved"]["plans"] == {"hourly": {"amount": "100000"}}
    assert printed["resolved"]["access_url"] == "https://api.example.com/x402/access"
    assert "config OK" in result.stderr


def test_check_of_the_example_config(example_dir: Path) -> None:
    result = run("check", "--config", "config.example.toml", cwd=example_dir)
    assert result.returncode == 0, result.stderr
    assert DEV_SECRET not in result.stdout + result.stderr
    assert set(json.loads(result.stdout)["resolved"]["plans"]) == {"hourly", "daily"}


def test_check_of_a_bad_config_exits_2_naming_the_key_path(tmp_path: Path) -> None:
    (tmp_path / "seller.toml").write_text(
        seller_toml('[server]\nprot = 8402\n[credentials]\nsecret = "' + ENV_SECRET + '"\n')
    )
    result = run("check", "--config", "seller.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "server.prot: unknown key" in result.stderr
    assert ENV_SECRET not in result.stderr
    assert result.stdout == ""


def test_check_of_an_unknown_plugin_exits_2_listing_the_installed(tmp_path: Path) -> None:
    (tmp_path / "seller.toml").write_text(
        seller_toml('[store]\nbackend = "nosuch"\n[credentials]\nsecret = "' + "s" * 40 + '"\n')
    )
    result = run("check", "--config", "seller.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "store.backend: no store plugin named 'nosuch'" in result.stderr
    installed = result.stderr.split("installed: ", 1)[1]
    assert "memory" in installed
    assert "sqlite" in installed


def test_check_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = run("check", "--config", "absent.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "cannot read config file absent.toml" in result.stderr


# --------------------------------------------------------------- other usage


def test_plugins_lists_every_installed_plugin(tmp_path: Path) -> None:
    result = run("plugins", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ("memory", "sqlite", "facilitator", "gas-wallet", "jwt", "callback"):
        assert name in result.stdout
    assert "stores: memory" in result.stdout
    assert "settlers: gas-wallet" in result.stdout


def test_migrate_of_a_store_that_keeps_its_own_schema(example_dir: Path) -> None:
    """sqlite upgrades its file when it opens it: ``migrate`` has nothing to do, and says so."""
    result = run("migrate", "--config", "config.example.toml", cwd=example_dir)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the sqlite store keeps its own schema: nothing to migrate\n"
    assert not (example_dir / "x402srv.db").exists()


def test_help(tmp_path: Path) -> None:
    result = run("--help", cwd=tmp_path)
    assert result.returncode == 0
    for word in ("check", "plugins", "--config"):
        assert word in result.stdout


def test_serve_with_port_0_exits_2(example_dir: Path) -> None:
    result = run("--config", "config.example.toml", "--port", "0", cwd=example_dir)
    assert result.returncode == 2
    assert "--port" in result.stderr


def test_serve_without_config_is_a_usage_error(tmp_path: Path) -> None:
    assert run("serve", cwd=tmp_path).returncode == 2


# ---------------------------------------------------------------- real serve


@pytest.fixture
def served(example_dir: Path) -> Iterator[str]:
    """``python -m x402srv --config config.example.toml --port P``, stopped by its PID."""
    port = free_port()
    log = (example_dir / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "x402srv", "--config", "config.example.toml", "--port", str(port)],
        cwd=example_dir,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/.well-known/agent.json", timeout=30, process=process)
        yield url
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()
    assert DEV_SECRET not in (example_dir / "server.log").read_text(errors="replace")


def stored_record(directory: Path, challenge_id: str) -> dict[str, object]:
    with contextlib.closing(sqlite3.connect(directory / "x402srv.db")) as db:
        row = db.execute(
            "SELECT record FROM challenges WHERE challenge_id = ?", (challenge_id,)
        ).fetchone()
    assert row is not None
    return dict(json.loads(row[0]))


def test_serve_the_example_config(served: str, example_dir: Path) -> None:
    with httpx.Client(base_url=served, timeout=10) as client:
        card = client.get("/.well-known/agent.json")
        card2 = client.get("/.well-known/agent-card.json", headers={"A2A-Version": "0.3"})
        assert card.status_code == card2.status_code == 200
        assert card.content == card2.content  # the 0.3 card, by path or by header
        assert card.json()["url"] == "http://127.0.0.1:8402/x402/access"

        discovery = client.post("/x402/access", json={})
        assert discovery.status_code == 402
        assert discovery.headers["cache-control"] == "no-store"
        required = json.loads(base64.b64decode(discovery.headers["payment-required"]))
        assert [a["extra"]["planId"] for a in required["accepts"]] == ["hourly", "daily"]
        assert required == {k: discovery.json()[k] for k in required}
        assert discovery.json()["chainId"] == 84532

        challenge = client.post("/x402/access", json={"planId": "hourly"})
        assert challenge.status_code == 402
        body = challenge.json()
        assert body["planId"] == "hourly"
        assert body["accepts"][0]["extra"]["challengeId"] == body["challengeId"]
        assert "payment-required" in challenge.headers

        a2a = client.post("/a2a", json={"jsonrpc": "2.0", "id": "rpc-7", "method": "x"})
        assert a2a.status_code == 200  # A2A JSON-RPC (issue 9): errors are in the body
        assert a2a.json()["jsonrpc"] == "2.0"
        assert a2a.json()["id"] == "rpc-7"
        assert a2a.json()["error"]["code"] == -32601

        jwks = client.get("/.well-known/jwks.json")
        assert jwks.status_code == 404
        assert jwks.headers["content-type"].startswith("application/problem+json")
        assert jwks.json()["code"] == "NOT_FOUND"
        assert jwks.json()["status"] == 404

    record = stored_record(example_dir, body["challengeId"])
    assert record["state"] == "PENDING"
    assert record["request_id"] == body["requestId"]
    assert record["plan_id"] == "hourly"
    assert record["amount"] == "100000"


def test_serve_on_a_terminal_names_no_flags_x402srv_lacks(example_dir: Path) -> None:
    """Issue 30: on a terminal Sanic told the seller to "consider using '--debug' or '--dev'",
    flags of its own command line, not of x402srv's. A real serve on a real pty."""
    main_fd, terminal = pty.openpty()
    port = str(free_port())
    process = subprocess.Popen(
        [sys.executable, "-m", "x402srv", "--config", "config.example.toml", "--port", port],
        cwd=example_dir,
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    seen = b""

    def read(until: bytes | None, seconds: float) -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in seen):
            if select.select([main_fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(main_fd, 65536)
                except OSError:  # EIO: the process is gone, and with it the terminal's writer
                    return
            elif until is None and process.poll() is not None:
                return

    try:
        read(b"Worker ready", 30)
        assert b"Worker ready" in seen, seen.decode(errors="replace")
        # (answering first: a SIGTERM right at "Worker ready" can be lost, see the t30 note)
        wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=30, process=process)
        os.killpg(process.pid, signal.SIGTERM)
        read(None, 15)  # (a terminal nobody reads would block the server's last log lines)
        assert process.wait(5) == 0, seen.decode(errors="replace")
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
        os.close(main_fd)
    assert b"Consider using" not in seen
    assert b"--debug" not in seen
