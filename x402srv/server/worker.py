"""One serving process: the app on the sockets the main process bound.

``run_worker`` builds the app from the config file and serves it with Sanic in
this process (``Sanic.serve_single``) on the inherited public socket. The
console's own listener, when there is one, is served by the same app in the
same event loop (``Listening.serve_also``), opened after the app started
and closed with it: Sanic's own way to serve a second socket (a second
``app.prepare``) never finished its shutdown.

A stop (SIGTERM, SIGINT, or the supervisor's SIGTERM) is graceful:

1. every listener stops accepting; idle keep-alive connections are closed, and
   a connection with a request in flight closes after its answer (instead of
   waiting for the client's next request or the keep-alive timeout);
2. requests in flight get up to ``GRACEFUL_SECONDS`` to finish; what is still
   open then is cut (a settlement cut short is resolved by the next request or
   the reconciler);
3. the plugins close (``after_server_stop``), and the process exits without
   the cyclic garbage collection of a normal interpreter exit, which took
   seconds for this heap and is of no use to a process that ends.

Under the supervisor (several workers) a worker ignores SIGINT (the
supervisor owns the terminal's Ctrl+C and forwards SIGTERM) and ignores any
further SIGTERM once it stops: systemd signals every process of the service,
and a second SIGTERM must not kill a worker that is still finishing requests.
The supervisor enforces the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from socket import socket
from typing import Any

from sanic import Sanic
from sanic.server import AsyncioServer, HttpProtocol, Signal
from sanic.server import serve as sanic_serve

from x402srv.config.models import load_config
from x402srv.server.app import (
    create_app,  # imported once by the main process, before it forks workers
)
from x402srv.server.logs import configure_logging
from x402srv.server.options import with_overrides
from x402srv.server.sockets import Listeners

__all__ = [
    "GRACEFUL_SECONDS",
    "SWITCH_INTERVAL_SECONDS",
    "Listening",
    "WorkerSpec",
    "run_worker",
]

#: How long requests in flight may take to finish once a stop began.
GRACEFUL_SECONDS = 15.0
#: ``sys.setswitchinterval`` of a serving process (Python's default is 0.005).
SWITCH_INTERVAL_SECONDS = 0.001
#: How often a stopping worker closes the connections that became idle.
_DRAIN_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs: the config, the ``--host/--port/--workers`` overrides, the sockets.

    ``ready`` is the supervisor's end of a pipe: the worker writes to it once it
    serves (None when the main process serves itself).
    """

    config_path: str
    overrides: Mapping[str, Any]
    listeners: Listeners
    ready: Connection | None = None


def run_worker(spec: WorkerSpec) -> None:
    """Serve until stopped (see the module docstring); raises ``ConfigError`` on a bad config."""
    supervised = spec.ready is not None
    if supervised:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging()  # a spawned worker does not inherit the parent's handlers
    # The sqlite store's thread hands results back to the event loop; with the
    # default 5 ms switch interval it could wait that long for the GIL while the
    # loop runs other requests (1 ms: +8% unpaid requests/s, lower p99).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    # Sanic tells a terminal to "consider using '--debug' or '--dev'": flags of its own
    # command, which x402srv does not have (a seller would look for them in vain).
    os.environ.setdefault("SANIC_IGNORE_PRODUCTION_WARNING", "1")
    app = create_app(with_overrides(load_config(spec.config_path), spec.overrides))
    app.config.GRACEFUL_SHUTDOWN_TIMEOUT = GRACEFUL_SECONDS
    app.prepare(
        sock=spec.listeners.public,
        single_process=True,
        access_log=False,
        motd=False,
    )
    listening = Listening(app)
    if spec.listeners.admin is not None:
        listening.serve_also(spec.listeners.admin)
    _take_over_signals(app, supervised=supervised)
    if spec.ready is not None:
        _report_ready(app, spec.ready)
    # The ~150,000 objects of the loaded modules and the built app live as long as the
    # process: kept out of the collector's reach, a full collection walks only what
    # requests made instead of stalling the loop ~90 ms (measured under load on a
    # 2-core machine; docs/performance.md).
    gc.collect()
    gc.freeze()
    Sanic.serve_single(primary=app)
    gc.freeze()  # the exit's collection walked every object of the heap: seconds, for nothing


#: Our signal handlers go in before every other start-up listener (higher runs first).
_SIGNALS_FIRST = 1_000_000


def _take_over_signals(app: Sanic[Any, Any], *, supervised: bool) -> None:
    """Once the loop runs: SIGTERM (and SIGINT, unless supervised) stop the app, never lost.

    Sanic's own handlers call ``app.stop()`` at once, which stops the event
    loop; a signal that came while the last start-up listener finished was
    swallowed by that ``run_until_complete`` and the server then served on,
    deaf to it (a SIGTERM right at "Worker ready": a deploy's stop waits for
    its kill timeout). Ours wait until the app is serving, then stop it. A
    supervised worker ignores SIGINT: a terminal's Ctrl-C reaches the main
    process, which stops the workers (``supervisor``).
    """
    signals = (signal.SIGTERM,) if supervised else (signal.SIGTERM, signal.SIGINT)

    async def take_over(app: Sanic[Any, Any]) -> None:
        loop = asyncio.get_running_loop()

        def stop_once_serving() -> None:
            if app.state.is_running:  # set just before the loop runs for good
                app.stop(terminate=False)
            else:  # still starting: look again at the loop's next turn
                loop.call_soon(stop_once_serving)

        def stop() -> None:
            # Off the loop's handlers first: Sanic resets the ones it finds there to
            # the default action (die) when the loop stops.
            for signum in signals:
                loop.remove_signal_handler(signum)
                signal.signal(signum, signal.SIG_IGN)
            stop_once_serving()

        for signum in signals:
            loop.add_signal_handler(signum, stop)
        if supervised:
            loop.remove_signal_handler(signal.SIGINT)
            signal.signal(signal.SIGINT, signal.SIG_IGN)

    app.register_listener(take_over, "after_server_start", priority=_SIGNALS_FIRST)


def _report_ready(app: Sanic[Any, Any], ready: Connection) -> None:
    """Once serving: tell the supervisor."""

    @app.after_server_start
    async def serving(app: Sanic[Any, Any]) -> None:
        ready.send_bytes(b"ready")
        ready.close()


@dataclass(eq=False)
class Listening:
    """The app's listeners beyond the main one, and every listener's connections in a stop.

    ``serve_also`` serves the app on one more socket, opened once the app
    started and closed when it stops, its requests in flight drained like the
    main listener's.

    Sanic closes idle connections once when it stops, then waits for the rest
    for up to its graceful timeout; a keep-alive connection whose request
    finished meanwhile stayed open (and the worker with it) until the client's
    keep-alive ran out. Once a stop began, this marks connections with a request
    in flight to close after their answer, and closes idle ones, on every
    listener, until the process stops.
    """

    app: Sanic[Any, Any]
    connections: set[HttpProtocol] = field(default_factory=set)
    _extra: list[tuple[socket, set[HttpProtocol]]] = field(default_factory=list)
    _servers: list[AsyncioServer] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _deadline: float = 0.0

    def __post_init__(self) -> None:
        # The main listener's connections: Sanic makes this set when it is not given one.
        self.app.state.server_info[0].settings["connections"] = self.connections
        self.app.register_listener(self._open, "after_server_start")
        # Shutdown listeners run in reverse order: these run before the app's own.
        self.app.register_listener(self._stop, "before_server_stop")
        self.app.register_listener(self._finish, "after_server_stop")

    def serve_also(self, sock: socket) -> None:
        """Serve the app on ``sock`` too, from ``after_server_start`` until the stop."""
        self._extra.append((sock, set()))

    async def _open(self, app: Sanic[Any, Any]) -> None:
        loop = asyncio.get_running_loop()
        for sock, connections in self._extra:
            server = sanic_serve(
                host=None,
                port=None,
                app=app,
                sock=sock,
                loop=loop,
                run_async=True,
                connections=connections,
                signal=Signal(),
                register_sys_signals=False,
            )
            assert isinstance(server, AsyncioServer)
            self._servers.append(await server)

    async def _stop(self, app: Sanic[Any, Any]) -> None:
        self._deadline = time.monotonic() + GRACEFUL_SECONDS
        for server in self._servers:
            server.close()  # type: ignore[no-untyped-call]
        self._task = asyncio.get_running_loop().create_task(self._close_when_idle())

    def _all(self) -> list[HttpProtocol]:
        return [*self.connections, *(c for _, extra in self._extra for c in extra)]

    async def _close_when_idle(self) -> None:
        while True:
            for connection in self._all():
                if not connection.close_if_idle() and connection.http is not None:
                    connection.http.keep_alive = False  # closes after the answer
            await asyncio.sleep(_DRAIN_POLL_SECONDS)

    async def _finish(self, app: Sanic[Any, Any]) -> None:
        """The extra listeners' requests in flight finish (or are cut at the deadline)."""
        # Connections leave their set in Sanic's protocol callbacks; nothing announces it.
        while any(extra for _, extra in self._extra) and time.monotonic() < self._deadline:  # noqa: ASYNC110
            await asyncio.sleep(_DRAIN_POLL_SECONDS)
        for _, extra in self._extra:
            for connection in list(extra):
                connection.abort()  # type: ignore[no-untyped-call]
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
