"""Find, install and run anvil (Foundry's local Ethereum node).

anvil comes from the npm package pinned in package.json, so `npm ci` is the only set-up
step in a checkout. Outside one (x402srv installed from wheels), `x402srv demo` installs
that package once into a per-user cache directory, `~/.cache/x402srv/anvil-<version>`
(`$XDG_CACHE_HOME` respected), as playwright keeps its browsers in `~/.cache/ms-playwright`:
never into the current directory, where a stray `node_modules` would outlive the demo.
The binary is started directly, never through npx: npx would put a node process between
us and anvil, and stopping "the process we started" by PID would leave anvil running.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import httpx

from x402srv.devchain.errors import AnvilNotFoundError, AnvilStartError

ANVIL_NPM_PACKAGE = "@foundry-rs/anvil-linux-amd64"
ANVIL_VERSION = "1.7.1"
ANVIL_ENV_VAR = "X402SRV_ANVIL"
"""Set to an anvil binary to skip the node_modules search (e.g. a Foundry install)."""

_RELATIVE_BINARY = Path("node_modules", *ANVIL_NPM_PACKAGE.split("/"), "bin", "anvil")
_PORT_ATTEMPTS = 3


def anvil_cache_dir() -> Path:
    """Where ``ensure_anvil`` installs the pinned anvil for this user: never the cwd."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "x402srv" / f"anvil-{ANVIL_VERSION}"


def find_anvil(start: Path | None = None, *, parents: bool = True) -> Path:
    """Locate the anvil binary: $X402SRV_ANVIL, else node_modules in `start`, the cwd (and,
    with ``parents``, their parents), else the per-user cache ``ensure_anvil`` fills.

    Searching parents lets tests and scripts run from any sub-directory of the checkout.
    """
    override = os.environ.get(ANVIL_ENV_VAR)
    if override:
        binary = Path(override)
        if not _is_executable(binary):
            raise AnvilNotFoundError(f"{ANVIL_ENV_VAR}={override} is not an executable file")
        return binary
    bases = [Path(start).resolve()] if start is not None else []
    bases.append(Path.cwd().resolve())
    searched: list[Path] = []
    for base in bases:
        for directory in (base, *base.parents) if parents else (base,):
            candidate = directory / _RELATIVE_BINARY
            if candidate in searched:
                continue
            searched.append(candidate)
            if _is_executable(candidate):
                return candidate
    cached = anvil_cache_dir() / _RELATIVE_BINARY
    if _is_executable(cached):
        return cached
    raise AnvilNotFoundError(
        f"anvil not found (looked for {_RELATIVE_BINARY} in {bases[0]}"
        f"{' and its parents' if parents else ''}{', the cwd' if len(bases) > 1 else ''}"
        f" and {anvil_cache_dir()}). Run `npm ci` in the project directory, `x402srv demo` "
        f"(it installs anvil into that cache), or set {ANVIL_ENV_VAR} to an anvil binary."
    )


def ensure_anvil(project_dir: Path | None = None) -> Path:
    """The anvil binary; when none is found, the pinned npm package installed once into
    ``anvil_cache_dir()`` (never into ``project_dir`` or the cwd).

    For the demo: one command should work on a fresh machine, as long as npm exists.
    """
    try:
        return find_anvil(project_dir)
    except AnvilNotFoundError:
        pass
    npm = shutil.which("npm")
    if npm is None:
        raise AnvilNotFoundError(
            "anvil is not installed and npm is not on PATH to install it (or set "
            f"{ANVIL_ENV_VAR} to an anvil binary, e.g. from Foundry)"
        )
    target = anvil_cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    package = f"{ANVIL_NPM_PACKAGE}@{ANVIL_VERSION}"
    result = subprocess.run(
        [npm, "install", "--prefix", str(target), "--no-save", "--no-audit", "--no-fund", package],
        cwd=target,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise AnvilNotFoundError(f"npm install {package} failed:\n{result.stderr.strip()}")
    return find_anvil(target, parents=False)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _free_port(host: str) -> int:
    """Ask the OS for an unused port. Another process may grab it before anvil binds it,
    which is why `AnvilProcess.start` retries."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _reap(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop `process` by PID: SIGTERM, then SIGKILL if it has not exited after `timeout`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class AnvilProcess:
    """One anvil node on 127.0.0.1 with automine, stopped by PID; a context manager.

    A finalizer also stops the node if the object is dropped or the interpreter exits
    without `stop()`, so a failing test cannot leak a node.
    """

    def __init__(
        self,
        binary: Path | None = None,
        *,
        chain_id: int = 31337,
        host: str = "127.0.0.1",
        port: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        self.binary = binary if binary is not None else find_anvil()
        self.chain_id = chain_id
        self.host = host
        self._requested_port = port
        self._extra_args = list(extra_args)
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._port: int | None = None
        self._finalizer: weakref.finalize[..., AnvilProcess] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise AnvilStartError("anvil is not started")
        return self._port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise AnvilStartError("anvil is not started")
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> Self:
        """Start anvil and return once it answers eth_chainId."""
        if self._process is not None:
            raise AnvilStartError("anvil is already started")
        attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
        error = ""
        for _ in range(attempts):
            port = self._requested_port or _free_port(self.host)
            error = self._launch(port)
            if not error:
                return self
            if "already in use" not in error:
                break
        raise AnvilStartError(f"anvil failed to start: {error}")

    def _launch(self, port: int) -> str:
        """Run anvil on `port`; return "" once it is ready, else why it is not."""
        args = [
            str(self.binary),
            "--host",
            self.host,
            "--port",
            str(port),
            "--chain-id",
            str(self.chain_id),
            "--quiet",
            *self._extra_args,
        ]
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()/below
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        self._process, self._stderr, self._port = process, stderr, port
        self._finalizer = weakref.finalize(self, _reap, process, 5.0)
        if self._wait_ready(process):
            return ""
        stderr.seek(0)
        reason = stderr.read().decode(errors="replace").strip()
        self.stop()
        return reason or f"no answer on {self.url} within {self._startup_timeout}s"

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> bool:
        request = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
        deadline = time.monotonic() + self._startup_timeout
        # Short probes: a foreign server holding the port may accept and never answer.
        with httpx.Client(timeout=0.2) as http:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    return False
                try:
                    if "result" in http.post(self.url, json=request).json():
                        return True
                except (httpx.TransportError, ValueError):
                    pass
                time.sleep(0.02)
        return False

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate anvil by PID (kill after `timeout`); safe to call twice."""
        process, self._process = self._process, None
        if process is not None:
            _reap(process, timeout)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def detach(self) -> int:
        """Leave the node running after this object is gone; return its PID to stop it later.

        For ``x402srv demo --keep``: the finalizer would otherwise stop the node when the
        demo's interpreter exits. The caller now owns the PID.
        """
        pid = self.pid
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._process = None
        return pid

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
