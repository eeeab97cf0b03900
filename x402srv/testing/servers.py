"""Real server processes for tests, the demo and benchmarks, stopped by PID.

``SellerConfig`` builds a seller TOML for a local chain; ``ServerProcess`` runs
``python -m x402srv`` on a free port, waits until the agent card answers, and
keeps its output in a log file that tests can read (and grep for secrets).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx

from x402srv.testing.launcher import Launched, popen
from x402srv.testing.toml import dumps as toml_dumps

__all__ = ["ServerProcess", "free_port", "seller_config", "wait_for_http"]


def _kill_group(process: subprocess.Popen[bytes] | Launched) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(
    url: str, *, timeout: float, process: subprocess.Popen[bytes] | Launched | None = None
) -> None:
    """GET ``url`` until it answers below 500, failing early if ``process`` exits.

    One client for every try: ``httpx.get`` builds a client, and with it an SSL
    context, each time (~20 ms of CPU), which the process starting up would wait for.
    """
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=0.5) as client:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(
                    f"process exited with {process.returncode} before {url} answered"
                )
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code < 500:
                    return
            time.sleep(0.02)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def seller_config(
    *,
    rpc_url: str,
    chain_id: int,
    asset: str,
    wallet_address: str,
    store: Mapping[str, Any],
    settlement: Mapping[str, Any],
    credentials: Mapping[str, Any] | None = None,
    plans: list[dict[str, Any]] | None = None,
    server: Mapping[str, Any] | None = None,
    asset_name: str = "USD Coin",
    asset_version: str = "2",
    **sections: Any,
) -> dict[str, Any]:
    """A complete seller config for a custom ``eip155:<id>`` chain (anvil).

    Extra keyword arguments become further top-level tables (``reconciler=...``).
    """
    document: dict[str, Any] = {
        "seller": {
            "agent_name": "Weather Oracle",
            "agent_description": "Paid hourly weather data",
            "agent_url": "http://127.0.0.1",
            "provider_name": "Example Inc",
            "provider_url": "https://example.com",
            "wallet_address": wallet_address,
            "network": f"eip155:{chain_id}",
        },
        "plans": plans
        or [
            {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of API access"},
            {"plan_id": "daily", "unit_amount": "$1.50", "description": "One day of API access"},
        ],
        "server": dict(server or {}),
        "store": dict(store),
        "settlement": dict(settlement),
        "credentials": dict(credentials or {"secret": "test-secret-" + "x" * 32}),
        "network": {
            "asset": asset,
            "asset_name": asset_name,
            "asset_version": asset_version,
            "decimals": 6,
            "rpc_url": rpc_url,
        },
    }
    document.update(sections)
    return document


@dataclass
class ServerProcess:
    """``python -m x402srv --config FILE`` on a free port.

    In a test session it is forked from the warm zygote (``launcher.WARM``);
    ``fresh=True`` starts a fresh interpreter there too.
    """

    config: Mapping[str, Any]
    directory: Path
    workers: int = 1
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | Launched | None = None
    fresh: bool = False

    @property
    def config_path(self) -> Path:
        return self.directory / "seller.toml"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_url(self) -> str:
        base = str(self.config.get("server", {}).get("base_path", ""))
        return f"{self.url}{base}/x402/access"

    def start(self, timeout: float = 30.0) -> Self:
        if self.process is not None:  # a restart: reap (or stop) the previous process first
            self.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(toml_dumps(self.config))
        args = ["--config", str(self.config_path), "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = popen(
                [*args, "--workers", str(self.workers)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.directory,
                start_new_session=True,  # its own process group: kill() takes workers along
                fresh=self.fresh,
            )
        try:
            wait_for_http(
                f"{self.url}/.well-known/agent.json", timeout=timeout, process=self.process
            )
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"x402srv did not start: {exc}\n{self.logs()[-4000:]}") from exc
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (graceful), then SIGKILL if it does not exit in time."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
        _kill_group(process)  # stray workers of a multi-worker server

    def kill(self) -> None:
        """SIGKILL: a crash, not a shutdown."""
        process, self.process = self.process, None
        if process is not None:
            _kill_group(process)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
