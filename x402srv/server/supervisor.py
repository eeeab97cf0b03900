"""``--workers N``: N serving processes on the sockets the main process bound.

The main process starts N workers (``worker.run_worker``, each its own
process), then only watches them:

    a worker serves              it says so on its pipe (``WorkerSpec.ready``)
    a serving worker dies        a new one takes its place (logged as an error)
    a worker dies before serving every worker is stopped, exit 1 (it would fail again)
    SIGTERM or SIGINT            SIGTERM to every worker, which stops gracefully
                                 (``worker``); the main process exits when they have
    a second SIGTERM or SIGINT,  SIGKILL to every worker that is left
    or ``stop_seconds`` passed
    the main process dies        (Linux) every worker gets SIGTERM from the kernel

This replaces Sanic's multi-process manager, which x402srv used before: with
two listeners its workers never finished stopping, and its main process waited
for workers' states in a dictionary both sides rewrote (up to 10 s per wait),
and killed every worker whose start took longer than 30 s (a loaded machine).
Signals only set a flag and wake the loop through a pipe; everything else
happens in the loop.

On Linux the workers are forked: the main process holds no thread, event loop
or open client by then (``serve.preflight`` closed them), and a forked worker
serves in a fraction of the time a spawned one takes to import everything
again (seconds each, on a busy machine tens of seconds). Elsewhere they are
spawned.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from x402srv.errors import ConfigError
from x402srv.server.worker import WorkerSpec, run_worker

__all__ = ["Supervisor"]

log = logging.getLogger("x402srv.server")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: prctl(2) option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def _worker_main(spec: WorkerSpec, inherited: tuple[int, ...], parent: int) -> None:
    """A worker process's entry point: a config the main process accepted fails rarely here."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the supervisor's handler, if forked
    for fd in inherited:  # the supervisor's own pipe, if forked
        with contextlib.suppress(OSError):
            os.close(fd)
    _stop_with(parent)
    try:
        run_worker(spec)
    except ConfigError as exc:
        print(f"x402srv: configuration error: {exc}", flush=True)
        raise SystemExit(2) from None


def _stop_with(parent: int) -> None:
    """Linux: SIGTERM this worker when the main process dies, even of SIGKILL.

    Otherwise a worker outlives a main process killed by the OOM killer or a
    ``kill -9``, keeps serving, and holds the port the restarted server needs.
    """
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


@dataclass(eq=False)
class _Worker:
    index: int
    process: BaseProcess
    ready: Connection | None  # None once it said it serves (or its pipe closed)
    serving: bool = False


class Supervisor:
    """Runs ``count`` workers of ``spec`` until a stop signal (``run``)."""

    def __init__(self, spec: WorkerSpec, count: int, *, stop_seconds: float) -> None:
        self._spec = spec
        self._count = count
        self._stop_seconds = stop_seconds
        self._forks = sys.platform == "linux"
        self._context = (
            multiprocessing.get_context("fork")
            if self._forks
            else multiprocessing.get_context("spawn")
        )
        self._workers: list[_Worker] = []
        self._signals: list[int] = []
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    def run(self) -> int:
        """Serve until stopped; the exit code (0 after a stop signal, 1 if a worker failed)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        try:
            for index in range(self._count):
                self._start(index)
            return self._watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._kill_all()
            os.close(self._wake_read)
            os.close(self._wake_write)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_write, b"\0")

    def _start(self, index: int) -> None:
        reader, writer = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=_worker_main,
            args=(
                replace(self._spec, ready=writer),
                (self._wake_read, self._wake_write) if self._forks else (),
                os.getpid(),
            ),
            name=f"x402srv-worker-{index}",
            daemon=True,
        )
        process.start()
        writer.close()
        self._workers.append(_Worker(index, process, reader))

    def _watch(self) -> int:
        exit_code = 0
        deadline: float | None = None
        while True:
            if self._signals and deadline is None:
                name = signal.Signals(self._signals[0]).name
                log.info("%s: stopping %d worker(s)", name, len(self._workers))
                deadline = self._stop(self._stop_seconds)
            elif len(self._signals) > 1:
                log.warning("second stop signal: killing the workers")
                self._kill_all()
            if deadline is not None and not self._workers:
                return exit_code
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if timeout == 0.0:
                log.warning("workers still busy after %.0f s: killing them", self._stop_seconds)
                self._kill_all()
                continue
            woke = wait(self._waitables(), timeout)
            if self._wake_read in woke:
                os.read(self._wake_read, 64)
            for worker in list(self._workers):
                if worker.ready is not None and worker.ready in woke:
                    self._heard(worker)
                ended = worker.process.sentinel in woke
                if ended and self._ended(worker, stopping=deadline is not None):
                    exit_code = 1
                    deadline = deadline or self._stop(self._stop_seconds)

    def _waitables(self) -> list[Any]:
        waitables: list[Any] = [self._wake_read]
        for worker in self._workers:
            waitables.append(worker.process.sentinel)
            if worker.ready is not None:
                waitables.append(worker.ready)
        return waitables

    def _heard(self, worker: _Worker) -> None:
        assert worker.ready is not None
        with contextlib.suppress(EOFError, OSError):
            worker.serving = worker.ready.recv_bytes() == b"ready"
        worker.ready.close()
        worker.ready = None
        if worker.serving and all(w.serving for w in self._workers):
            log.info("%d workers serving", len(self._workers))

    def _ended(self, worker: _Worker, *, stopping: bool) -> bool:
        """Forget a worker that ended; True when that is a failure that stops everything."""
        worker.process.join()
        self._workers.remove(worker)
        if worker.ready is not None:
            worker.ready.close()
        code = worker.process.exitcode
        if stopping:
            return False
        if not worker.serving:
            log.error("worker %d exited (code %s) before it served: stopping", worker.index, code)
            return True
        log.error("worker %d died (code %s): starting another", worker.index, code)
        self._start(worker.index)
        return False

    def _stop(self, seconds: float) -> float:
        """SIGTERM every worker; no new one starts: the main process lets go of the sockets."""
        self._spec.listeners.close()
        for worker in self._workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.terminate()
        return time.monotonic() + seconds

    def _kill_all(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
        for worker in self._workers:
            worker.process.join(5)
        self._workers.clear()
