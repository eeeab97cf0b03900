"""Start ``x402srv`` processes for tests: forked from a warm zygote, or as fresh interpreters.

``popen(args, ...)`` and ``run(args, ...)`` mirror ``subprocess.Popen`` and
``subprocess.run`` for ``python -m x402srv ARGS``. When ``WARM`` is set (the
repository's root ``conftest.py`` sets it for the test session) the process is
forked by ``x402srv.testing.zygote``, which has imported x402srv and its plugins
once: a real process with its own pid, process group, environment and
streams, that skips the ~0.7 s of CPU each fresh interpreter spends importing.
Otherwise (the demo, the benchmarks), with ``fresh=True`` (a test about
start-up itself) or with ``X402SRV_TEST_FRESH=1`` (to rule the zygote out while
debugging), it is a fresh interpreter.

The zygote starts at the first launch and stops when the test process exits
(its socket closes). Its children are its own, and so descend from the test
session like any child (the leak check finds them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["FRESH_ENV", "Launched", "popen", "run", "shutdown"]

#: Set to 1 to start every x402srv process as a fresh interpreter.
FRESH_ENV = "X402SRV_TEST_FRESH"
#: Fork from the zygote (set by the test session; off for the demo and benchmarks).
WARM = False


def _command(args: Sequence[str], program: str = "x402srv") -> list[str]:
    return [sys.executable, "-m", program, *args]


def _fresh(fresh: bool) -> bool:
    return fresh or not WARM or os.environ.get(FRESH_ENV) == "1"


_Stream = int | IO[Any] | None


class Launched:
    """A forked ``x402srv`` process: the parts of ``subprocess.Popen`` the tests use."""

    def __init__(self, pid: int, zygote: _Zygote, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.returncode(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.returncode(self.pid, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended since the poll
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "x402srv.testing.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        theirs.close()
        self.channel = ours
        self.ids = itertools.count(1)
        self.lock = threading.Lock()  # one request on the wire at a time
        self.changed = threading.Condition()
        self.started: dict[int, int] = {}  # request id -> pid
        self.ended: dict[int, int] = {}  # pid -> returncode
        self.gone = False
        threading.Thread(target=self._read, name="x402srv-zygote", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = self.channel.recv(1 << 16)
            except OSError:
                message = b""
            with self.changed:
                if not message:
                    self.gone = True
                    self.changed.notify_all()
                    return
                reply = json.loads(message)
                if "id" in reply:
                    self.started[reply["id"]] = reply["pid"]
                else:
                    self.ended[reply["pid"]] = reply["returncode"]
                self.changed.notify_all()

    def close(self) -> None:
        self.channel.shutdown(socket.SHUT_RDWR)  # the zygote reads the end of its socket
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.channel.close()
        if self.process.stderr is not None:
            self.process.stderr.close()

    def _failed(self) -> RuntimeError:
        stderr = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
        return RuntimeError(f"the x402srv test zygote is gone:\n{stderr[-4000:]}")

    def launch(
        self,
        args: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        streams: list[int],
        *,
        new_session: bool,
        program: str,
    ) -> int:
        number = next(self.ids)
        request = {
            "id": number,
            "args": list(args),
            "cwd": cwd,
            "env": dict(env),
            "new_session": new_session,
            "program": program,
        }
        with self.lock:
            socket.send_fds(self.channel, [json.dumps(request).encode()], streams)
            with self.changed:
                self.changed.wait_for(lambda: number in self.started or self.gone)
                if self.gone:
                    raise self._failed()
                return self.started.pop(number)

    def returncode(self, pid: int, *, timeout: float | None) -> int | None:
        with self.changed:
            self.changed.wait_for(lambda: pid in self.ended or self.gone, timeout=timeout)
            if pid not in self.ended and self.gone:
                raise self._failed()
            return self.ended.get(pid)


_ZYGOTE: _Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def _zygote() -> _Zygote:
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is None or _ZYGOTE.gone:
            _ZYGOTE = _Zygote()
        return _ZYGOTE


def shutdown() -> None:
    """Stop the zygote (its children are the tests' to stop); the next launch starts one."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        zygote, _ZYGOTE = _ZYGOTE, None
    if zygote is not None:
        zygote.close()


def _fd(stream: _Stream, default: int) -> tuple[int, IO[Any] | None]:
    """A file descriptor for ``stream``, and a file to close once it was passed on."""
    if stream is None:
        return default, None
    if stream == subprocess.DEVNULL:
        devnull = open(os.devnull, "r+b")  # noqa: SIM115  (closed once passed on)
        return devnull.fileno(), devnull
    if isinstance(stream, int):
        return stream, None
    return stream.fileno(), None


def popen(
    args: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    stdin: _Stream = subprocess.DEVNULL,
    stdout: _Stream = None,
    stderr: _Stream = None,
    start_new_session: bool = False,
    fresh: bool = False,
    program: str = "x402srv",
) -> subprocess.Popen[bytes] | Launched:
    """``python -m PROGRAM ARGS`` in ``cwd`` with exactly ``env``; stdout/stderr are files.

    ``program`` is ``x402srv`` or another of ``zygote.PROGRAMS`` (the local facilitator).
    """
    if _fresh(fresh):
        return subprocess.Popen(
            _command(args, program),
            cwd=cwd,
            env=dict(env),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=start_new_session,
        )
    closing: list[IO[Any]] = []
    fds: list[int] = []
    for stream, default in ((stdin, 0), (stdout, 1), (stderr, 2)):
        if stream == subprocess.STDOUT:
            fds.append(fds[1])
            continue
        fd, opened = _fd(stream, default)
        fds.append(fd)
        if opened is not None:
            closing.append(opened)
    zygote = _zygote()
    try:
        pid = zygote.launch(
            args, str(cwd), env, fds, new_session=start_new_session, program=program
        )
    finally:
        for opened in closing:
            opened.close()
    return Launched(pid, zygote, args)


def run(
    args: Sequence[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    timeout: float = 120.0,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` of ``python -m x402srv ARGS``, output captured as text."""
    if _fresh(fresh):
        return subprocess.run(
            _command(args),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        process = popen(args, cwd=cwd, env=env, stdout=out_write, stderr=err_write)
    finally:
        os.close(out_write)
        os.close(err_write)
    outputs: dict[int, bytes] = {}

    def drain(fd: int) -> None:
        with os.fdopen(fd, "rb") as stream:
            outputs[fd] = stream.read()

    readers = [threading.Thread(target=drain, args=(fd,)) for fd in (out_read, err_read)]
    for reader in readers:
        reader.start()
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        for reader in readers:
            reader.join()
    return subprocess.CompletedProcess(
        _command(args),
        code,
        outputs[out_read].decode(errors="replace"),
        outputs[err_read].decode(errors="replace"),
    )
