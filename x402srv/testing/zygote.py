"""A warm ``python -m x402srv``: one process that imported x402srv forks each one the tests run.

Every ``x402srv`` process a test starts (a server, or an operator command such
as ``reconcile`` or ``refunds list``) spends most of its CPU importing: about
0.7 s of the 2-core test machine per process, and the suite starts hundreds.
This process imports x402srv, its commands and every installed plugin once,
then waits on a socket. For each request it forks a child that becomes exactly
what ``python -m x402srv ARGS`` would be after its imports: its own working
directory, environment, standard streams and session, and ``main(ARGS)`` as
the program. The child is a real process with its own pid, signals and exit
status; only the import work is shared (copy-on-write).

The protocol (``x402srv.testing.launcher`` is the other end) is one datagram
per message on a ``SOCK_SEQPACKET`` socket pair:

- request: ``{"id", "args", "cwd", "env", "new_session", "program"}`` with the
  child's stdin, stdout and stderr as three file descriptors (``SCM_RIGHTS``);
  ``program`` is one of ``PROGRAMS``: ``x402srv`` itself, or the tests' local
  facilitator (``x402srv.testing.facilitator_app``, the official SDK's), which
  the suite starts dozens of times and whose SDK import costs ~0.5 s each;
- reply: ``{"id", "pid"}`` once the child exists;
- then ``{"pid", "returncode"}`` when it ends (negative: killed by a signal).

What a fresh interpreter reads when it starts is set again in the child:
``sys.path`` (the working directory, as ``-m`` does, and ``PYTHONPATH``),
``sys.argv``, the environment. x402srv reads its own variables when it uses them, not at import.
``prometheus_client`` is never imported here: it reads its multiprocess
directory at import, which ``serve`` sets before its workers import it.

Run as ``python -m x402srv.testing.zygote FD``; it ends when the socket closes.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.metadata
import json
import logging
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any, NoReturn

from x402srv.testing.tls import share_the_default_ssl_context

__all__ = ["PROGRAMS", "WARM_MODULES", "serve"]

#: What a child can become, as ``python -m NAME ARGS``: the module whose ``main(args)`` runs.
PROGRAMS = {
    "x402srv": "x402srv.cli.main",
    "x402srv.testing.facilitator_app": "x402srv.testing.facilitator_app",
}

#: Imported before the first fork: what a server or an operator command loads.
WARM_MODULES = (
    "x402srv.cli.main",
    "x402srv.server.serve",
    "x402srv.server.worker",
    "x402srv.server.app",
    "x402srv.admin",
    "x402srv.a2a",
    "x402srv.gateway.install",
    "x402srv.demo",
    "eth_account",
    "web3",
    # the local facilitator and the parts of the official SDK it loads when it starts
    "x402srv.testing.facilitator_app",
    "x402",
    "x402.mechanisms.evm",
    "x402.mechanisms.evm.exact",
    "x402.schemas",
)


def _warm() -> None:
    share_the_default_ssl_context()
    for name in WARM_MODULES:
        # (an optional extra that is not installed: the child that needs it fails as usual)
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for entry_point in importlib.metadata.entry_points(group="x402srv"):
        try:
            entry_point.load()
        except Exception:  # noqa: S112  (the child reports a broken plugin as x402srv would)
            continue
    if "prometheus_client" in sys.modules:  # see the module docstring
        raise RuntimeError("the zygote imported prometheus_client; metrics would break")
    if threading.active_count() != 1:  # a fork copies only the calling thread
        raise RuntimeError(f"the zygote runs {threading.active_count()} threads")


#: sys.path as this interpreter started: [its cwd, *its PYTHONPATH, *the rest].
_STARTED_PATH: list[str] = []
#: This interpreter's own PYTHONPATH entries (read in ``serve``: a child's environment
#: replaces ``os.environ`` before its path is set).
_STARTED_PYTHONPATH: list[str] = []


def _set_path(cwd: str, pythonpath: str) -> None:
    """``sys.path`` as a fresh ``python -m`` in ``cwd`` with ``pythonpath`` would have it."""
    rest = _STARTED_PATH[1 + len(_STARTED_PYTHONPATH) :]
    added = [os.path.join(cwd, p) for p in pythonpath.split(os.pathsep) if p]
    sys.path[:] = [cwd, *added, *rest]


def _child(request: dict[str, Any], fds: list[int], closing: list[int]) -> NoReturn:
    code = 1
    try:
        for fd in closing:
            os.close(fd)
        if request.get("new_session"):
            os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _set_path(os.getcwd(), os.environ.get("PYTHONPATH", ""))
        program = request.get("program", "x402srv")
        sys.argv = [program, *request["args"]]
        returned = importlib.import_module(PROGRAMS[program]).main(request["args"])
        code = returned if isinstance(returned, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    try:  # what an interpreter does on its way out
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def serve(fd: int) -> None:
    """Answer launch requests on the socket ``fd`` until it closes."""
    _STARTED_PATH[:] = sys.path
    _STARTED_PYTHONPATH[:] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    _warm()
    gc.collect()
    gc.freeze()  # the children share these pages instead of copying them at their first GC
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in pytest is pytest's to handle
    channel = socket.socket(fileno=fd)
    selector = selectors.EpollSelector()
    selector.register(channel, selectors.EVENT_READ, None)
    pidfds: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.data is None:
                message, fds, _flags, _addr = socket.recv_fds(channel, 1 << 20, 3)
                if not message:
                    return  # pytest is gone; its leak check stops what is left
                request = json.loads(message)
                closing = [channel.fileno(), selector.fileno(), *pidfds]
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, closing)
                for passed in fds:
                    os.close(passed)
                pidfd = os.pidfd_open(pid)
                pidfds[pidfd] = pid
                selector.register(pidfd, selectors.EVENT_READ, pid)
                channel.send(json.dumps({"id": request["id"], "pid": pid}).encode())
            else:
                pid = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                del pidfds[key.fd]
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                channel.send(json.dumps({"pid": pid, "returncode": code}).encode())


if __name__ == "__main__":
    serve(int(sys.argv[1]))
