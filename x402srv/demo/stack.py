"""The demo's processes: anvil, an x402srv server and the seller's API, stopped by PID.

``DemoStack`` starts them one by one and remembers each as soon as it exists, so
``stop()`` after a failure (or Ctrl-C) half-way stops exactly what was started and
nothing else. The two servers run in their own sessions: a Ctrl-C in the terminal
reaches only the demo, which then stops them in order (API, x402srv, chain).

Everything the seller would keep on disk lives in one temp directory: the config,
the sqlite store, the logs and two secret files (mode 0600) holding a fresh JWT
secret and the gas wallet's anvil dev key. The config refers to them as
``{ file = ... }`` so the demo never passes a secret on a command line, and the
operator commands (``x402srv challenges list --config ...``) work on a kept stack.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from x402srv.demo.accounts import DemoAccounts
from x402srv.devchain import Devchain
from x402srv.testing import toml
from x402srv.testing.servers import ServerProcess, free_port, seller_config, wait_for_http

__all__ = ["PLANS", "ApiProcess", "DemoStack"]

PLANS = [
    {"plan_id": "hourly", "unit_amount": "$0.10", "description": "One hour of weather data"},
    {"plan_id": "daily", "unit_amount": "$1.50", "description": "One day of weather data"},
]
JWT_KEY_FILE = "jwt-secret"
GAS_WALLET_KEY_FILE = "gas-wallet.key"
_STOP_TIMEOUT = 10.0


def _write_secret(path: Path, value: str) -> None:
    """Create ``path`` readable by its owner only (never world-readable, even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")


def stop_pid_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful shutdown), then SIGKILL to its process group if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@dataclass
class ApiProcess:
    """``python -m x402srv.demo.seller_api`` on a free port, in its own session."""

    config_path: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> None:
        """Start without waiting: it boots while x402srv does (``wait_ready`` later)."""
        command = [sys.executable, "-m", "x402srv.demo.seller_api"]
        command += ["--config", str(self.config_path), "--port", str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.config_path.parent,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 30.0) -> None:
        # Any answer below 500 means it serves; without a token /weather is a 401.
        wait_for_http(f"{self.url}/weather", timeout=timeout, process=self.process)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_pid_process(process)


@dataclass
class DemoStack:
    """What the demo started, in start order; ``stop()`` undoes it in reverse."""

    directory: Path
    accounts: DemoAccounts
    chain: Devchain | None = None
    server: ServerProcess | None = None
    api: ApiProcess | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "seller.toml"

    def start_chain(self, anvil: Path, *, buyer_usdc_atomic: int) -> Devchain:
        """anvil + the EIP-3009 token (deployed by dev account #0), the buyer funded."""
        self.chain = Devchain.start(anvil_binary=anvil)
        self.chain.mint(self.accounts.buyer.address, buyer_usdc_atomic)
        return self.chain

    def seller_config(self, chain: Devchain, port: int) -> dict[str, Any]:
        """The seller TOML: gas-wallet settlement, sqlite, secrets in files beside it."""
        config = seller_config(
            rpc_url=chain.rpc_url,
            chain_id=chain.chain_id,
            asset=chain.token.address,
            wallet_address=self.accounts.seller,
            store={"backend": "sqlite", "path": "x402srv.db"},
            settlement={
                "strategy": "gas-wallet",
                "gas_wallet_private_key": {"file": GAS_WALLET_KEY_FILE},
                # anvil mines at once; the default 0.5 s poll would only slow the demo
                "gas-wallet": {"poll_interval_seconds": 0.05},
            },
            credentials={"issuer": "jwt", "secret": {"file": JWT_KEY_FILE}},
            plans=PLANS,
            server={"host": "127.0.0.1", "port": port},
        )
        config["seller"]["agent_url"] = f"http://127.0.0.1:{port}"
        return config

    def start_servers(self) -> tuple[ServerProcess, ApiProcess]:
        """Write config and secrets, then start x402srv and the seller API side by side."""
        if self.chain is None:
            raise RuntimeError("start the chain first")
        _write_secret(self.directory / JWT_KEY_FILE, secrets.token_urlsafe(48))
        _write_secret(
            self.directory / GAS_WALLET_KEY_FILE, "0x" + bytes(self.accounts.gas_wallet.key).hex()
        )
        port = free_port()
        config = self.seller_config(self.chain, port)
        self.config_path.write_text(toml.dumps(config))
        self.api = ApiProcess(self.config_path, self.directory / "seller-api.log")
        self.api.spawn()
        self.server = ServerProcess(config, self.directory, port=port)
        self.server.start()  # rewrites the same seller.toml, waits for the agent card
        self.api.wait_ready()
        return self.server, self.api

    def pids(self) -> list[tuple[str, int]]:
        """(name, pid) of every process still ours, in stop order."""
        found: list[tuple[str, int]] = []
        if self.api is not None and self.api.process is not None:
            found.append(("seller API", self.api.process.pid))
        if self.server is not None and self.server.process is not None:
            found.append(("x402srv", self.server.process.pid))
        if self.chain is not None and self.chain.anvil.running:
            found.append(("anvil", self.chain.anvil.pid))
        return found

    def stop(self) -> list[tuple[str, int]]:
        """Stop everything started, API first and chain last; return what was stopped."""
        stopped = self.pids()
        if self.api is not None:
            self.api.stop()
        if self.server is not None:
            self.server.stop()
        if self.chain is not None:
            self.chain.stop()
        return stopped

    def detach(self) -> list[tuple[str, int]]:
        """``--keep``: leave every process running; the PIDs returned are the user's now."""
        kept = self.pids()
        if self.chain is not None:
            self.chain.rpc.close()
            self.chain.anvil.detach()
        self.api = self.server = self.chain = None
        return kept

    def logs(self) -> str:
        """The tail of both server logs, for a failure report."""
        parts = []
        for name in ("server.log", "seller-api.log"):
            path = self.directory / name
            if path.exists():
                text = path.read_text(errors="replace").strip()
                parts.append(f"--- {name} (last lines)\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)
