"""The integration tests' apps as real server processes, and raw HTTP requests to them.

``AppProcess`` runs one of ``tests/integrations/apps`` as a real server
process (uvicorn, or a plain ``python -m``) on a free port and stops it by
PID. ``raw_request`` writes a request line byte for byte: httpx normalises
``..`` and re-encodes paths, so path-trick tests cannot go through it.
``KeptAlive`` sends many small requests over one kept-alive connection, for
floods: httpx takes about 1 ms of CPU per request, so a flood of 20,000
requests through it measured mostly the client, on the core the server needs.
``open_sockets_to`` counts the machine's open connections to an app's port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from tests.support.paths import REPO
from x402srv.testing.servers import _kill_group, free_port, wait_for_http

_TCP_OPEN = {"01", "08"}  # ESTABLISHED, CLOSE_WAIT (/proc/net/tcp's st column)


@dataclass
class AppProcess:
    """``uvicorn <app>`` (or ``python -m <module> <port>``) on a free port."""

    target: str
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    health: str = "/_control/health"
    uvicorn: bool = True
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    cwd: Path = REPO  # where it runs (an app that reads ./seller.toml: the seller's directory)
    app_dir: Path | None = None  # uvicorn --app-dir: where ``target``'s module is

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        if self.uvicorn:
            command = [sys.executable, "-m", "uvicorn", self.target, "--port", str(self.port)]
            command += ["--host", "127.0.0.1", "--log-level", "warning", "--no-access-log"]
            if self.app_dir is not None:
                command += ["--app-dir", str(self.app_dir)]
        else:
            command = [sys.executable, "-m", self.target, str(self.port)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env={**os.environ, "PYTHONPATH": str(REPO), **self.env},
                start_new_session=True,
            )
        try:
            wait_for_http(self.url + self.health, timeout=30, process=self.process)
        except Exception as exc:
            self.stop()
            raise RuntimeError(f"{self.target} did not start: {exc}\n{self.logs()}") from exc
        return self

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            _kill_group(process)


def open_sockets_to(port: int) -> int:
    """Open TCP sockets whose far end is ``port`` (a gateway's, when only it connects there)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] in _TCP_OPEN:
                count += 1
    return count


async def held_mid_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, marker: bytes, what: str
) -> asyncio.StreamWriter:
    """A raw 200 answer read up to ``marker``, then left unread; its socket, still open.

    The answer keeps coming, unread: a close then sends a reset (``leave_at_once``).
    ``what`` names the call and its marker in the failures.
    """
    status = await asyncio.wait_for(reader.readline(), 10)
    assert status.startswith(b"HTTP/1.1 200"), f"{what}: {status!r}, {await reader.read(500)!r}"
    seen = b""
    while marker not in seen:
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        assert chunk, f"{what}: closed before the marker: {seen!r}"
        seen += chunk
    transport = writer.transport
    assert isinstance(transport, asyncio.Transport)
    transport.pause_reading()
    return writer


async def leave_at_once(writers: list[asyncio.StreamWriter]) -> None:
    """Buyers in the middle of their answers, all gone at once, the way ``wrk`` ends a run.

    Half send a FIN (the server reads an end of file while it still streams), half
    close with unread data, which the kernel turns into a reset.
    """
    for n, writer in enumerate(writers):
        if n % 2:
            writer.transport.abort()
        else:
            writer.write_eof()
    await asyncio.sleep(0.5)
    for writer in writers:
        writer.transport.abort()


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


async def raw_request(
    base_url: str, target: str, *, method: str = "GET", headers: Mapping[str, str] | None = None
) -> RawResponse:
    """Send ``<method> <target> HTTP/1.1`` exactly as given; read the whole answer."""
    host, _, port = base_url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        parsed[name.strip().lower()] = value.strip()
    if parsed.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return RawResponse(int(status_line.split()[1]), parsed, body)


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return out


class KeptAlive:
    """HTTP/1.1 requests one after another on one kept-alive connection (reopened if closed).

    ``async with KeptAlive("http://127.0.0.1:8000", local_address="127.0.0.2") as http:``
    then ``await http.post_json("/x402/access", {...})``. Answers must carry a
    Content-Length (Sanic's do); anything else fails loudly.
    """

    def __init__(self, base_url: str, *, local_address: str | None = None) -> None:
        host, _, port = base_url.removeprefix("http://").partition(":")
        self._host, self._port = host, int(port.split("/", 1)[0])
        self._local = (local_address, 0) if local_address else None
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def __aenter__(self) -> KeptAlive:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def post_json(self, path: str, body: object) -> RawResponse:
        content = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(content)}\r\n\r\n"
        )
        if self._streams is None:
            self._streams = await asyncio.open_connection(
                self._host, self._port, local_addr=self._local
            )
        reader, writer = self._streams
        writer.write(head.encode("latin-1") + content)
        await writer.drain()
        status_line, *header_lines = (
            (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        )
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise AssertionError(f"an answer without Content-Length: {status_line} {headers}")
        answer = await reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            await self._close()
        return RawResponse(int(status_line.split()[1]), headers, answer)

    async def _close(self) -> None:
        streams, self._streams = self._streams, None
        if streams is not None:
            streams[1].close()
            with contextlib.suppress(OSError):
                await streams[1].wait_closed()
