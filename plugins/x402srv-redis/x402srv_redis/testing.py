"""A real ``redis-server`` for tests: own port, own directory, stopped by PID.

Shipped in the package, like ``x402srv.testing``, because the project's tests
import helpers by module path. Never touches a Redis it did not start (the
machine may run its own on 6379).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from x402srv.testing.servers import free_port

__all__ = ["RedisServer", "StartRedis", "TlsFiles", "make_tls_files", "redis_server_binary"]


#: The tests' ``start_redis(**RedisServer fields but directory)`` fixture.
StartRedis = Callable[..., "RedisServer"]


def redis_server_binary() -> str | None:
    """``$X402SRV_REDIS_SERVER`` or ``redis-server`` on the PATH."""
    return os.environ.get("X402SRV_REDIS_SERVER") or shutil.which("redis-server")


@dataclass(frozen=True)
class TlsFiles:
    """A throw-away CA and a server certificate for 127.0.0.1 it signed."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """CA + server certificate with ``openssl`` (as an operator would make them)."""
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    ca_key = directory / "ca.key"
    csr = directory / "server.csr"
    ext = directory / "server.ext"
    ext.write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    _openssl("genrsa", "-out", ca_key, "2048")
    _openssl("req", "-x509", "-new", "-key", ca_key, "-days", "2", "-subj", "/CN=x402srv test CA",
             "-out", files.ca)  # fmt: skip
    _openssl("genrsa", "-out", files.key, "2048")
    _openssl("req", "-new", "-key", files.key, "-subj", "/CN=127.0.0.1", "-out", csr)
    _openssl("x509", "-req", "-in", csr, "-CA", files.ca, "-CAkey", ca_key, "-CAcreateserial",
             "-days", "2", "-extfile", ext, "-out", files.cert)  # fmt: skip
    return files


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


@dataclass
class RedisServer:
    """``redis-server`` on a free 127.0.0.1 port, with its data and log in ``directory``.

    ``appendonly`` keeps an AOF there (``appendfsync`` as given), so ``restart``
    brings the data back as a production server would; without it the server
    keeps nothing on disk (``--save ''``). With ``tls`` the port speaks TLS only.
    ``directives`` are more ``redis.conf`` lines as arguments
    (``("--rename-command", "CONFIG", "")``, ``("--replicaof", "127.0.0.1", "6379")``).
    """

    directory: Path
    password: str | None = None
    appendonly: bool = False
    tls: TlsFiles | None = None
    appendfsync: str = "everysec"
    directives: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        binary = redis_server_binary()
        if binary is None:
            raise RuntimeError("redis-server not found (install it or set X402SRV_REDIS_SERVER)")
        command = [
            binary,
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        if self.tls is None:
            command += ["--port", str(self.port)]
        else:
            command += [
                "--port", "0",
                "--tls-port", str(self.port),
                "--tls-cert-file", str(self.tls.cert),
                "--tls-key-file", str(self.tls.key),
                "--tls-ca-cert-file", str(self.tls.ca),
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password]
        return command + list(self.directives)

    def start(self, timeout: float = 10.0) -> Self:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout)
        except Exception:
            self.kill()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM: Redis flushes its AOF and exits, as on an orderly restart."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def kill(self) -> None:
        """SIGKILL: a crash; only what the AOF already holds survives."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(5)

    def restart(self, timeout: float = 10.0) -> Self:
        self.stop()
        return self.start(timeout)

    def _wait_ready(self, timeout: float) -> None:
        """PING (after AUTH) until the server answers PONG: it has loaded its data.

        While it loads its AOF it answers ``-LOADING``; a password-protected one
        answers ``-NOAUTH`` to anything but AUTH even then, so the PING is
        authenticated, or a restarted server would count as ready mid-load.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self.process.returncode}:\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            with contextlib.suppress(OSError):
                if self._ping().startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} did not answer in {timeout} s")

    def _ping(self) -> bytes:
        """The answer to PING (preceded by AUTH when there is a password)."""
        request, replies = b"PING\r\n", 1
        if self.password:
            request = _command("AUTH", self.password) + request
            replies = 2
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as raw:
            if self.tls is None:
                return _last_reply(raw, request, replies)
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                return _last_reply(sock, request, replies)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _command(*parts: str) -> bytes:
    """One command in RESP (a password may hold any character)."""
    encoded = [part.encode() for part in parts]
    return f"*{len(encoded)}\r\n".encode() + b"".join(
        b"$%d\r\n%s\r\n" % (len(part), part) for part in encoded
    )


def _last_reply(sock: socket.socket, request: bytes, replies: int) -> bytes:
    """Send ``request``; the last of its ``replies`` one-line replies."""
    sock.sendall(request)
    data = b""
    while data.count(b"\r\n") < replies:
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n")[replies - 1] if data.count(b"\r\n") >= replies else b""
