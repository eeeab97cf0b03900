"""The suite leaves nothing behind: a session-end check for processes and temp directories.

A pytest plugin (the root ``conftest.py`` loads it for every test path). A run
whose tests pass but that leaves a process running or a temp directory behind
fails anyway, after printing what it found and removing it, so nothing piles up
on a developer's machine or a CI runner. Issue 23 found both: a promoted
PostgreSQL standby still running after the failover test, and
``x402srv-pg-tls-*`` directories with private keys in ``/tmp``.

Processes. At start the session puts ``X402SRV_TEST_SESSION=<its pid>`` in the
environment every child inherits. At the end, one pass over ``/proc`` finds
every live process that descends from the session (by parent pid) or carries
the marker in its environment: the second catches what double-forked or
daemonised and now hangs off init, such as a PostgreSQL postmaster that
``pg_ctl`` started. Zombies are dead and do not count.

Temp directories. At start the session points ``TMPDIR`` (and ``tempfile``) at a
directory of its own under the system's temp directory (a pytest-xdist worker's goes
beside its controller's), after pytest placed its ``basetemp`` (which pytest removes
after a green run, ``tmp_path_retention_policy``, and keeps for a failed one; its empty
``pytest-of-<user>`` parent goes then too). Whatever ``mkdtemp`` created in this
session, in the test process or a child, lands there; at the end anything left in it is
a leak. Other sessions on the same machine have their own, so one session never blames
another.

The check reads ``/proc`` once and lists one directory: well under 100 ms.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["MARKER", "Leftover", "leftover_processes", "process_stat"]

#: The environment variable that marks a process as started by this test session.
MARKER = "X402SRV_TEST_SESSION"
_ROOT_PREFIX = "x402srv-session-"
_KILL_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class Leftover:
    """A process still alive at session end, and how it was found."""

    pid: int
    command: str
    why: str  # "child of the session" or "carries X402SRV_TEST_SESSION"


def process_stat(pid: str) -> tuple[int, str] | None:
    """``(ppid, state)`` of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return int(fields[1]), fields[0]


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200] or "?"


def leftover_processes(session_pid: int) -> list[Leftover]:
    """Live processes the session started (directly, or not) that are still running."""
    marker = f"{MARKER}={session_pid}".encode()
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == session_pid:
            continue
        stat = process_stat(entry)
        if stat is None or stat[1] in ("Z", "X"):  # gone, or dead and not reaped yet
            continue
        pid = int(entry)
        parents[pid] = stat[0]
        with contextlib.suppress(OSError):
            if marker in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                marked.add(pid)
    found: dict[int, str] = {}
    for pid in parents:
        seen: set[int] = set()
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor not in seen:
            if ancestor == session_pid:
                found[pid] = "child of the session"
                break
            seen.add(ancestor)
            ancestor = parents.get(ancestor)
    for pid in marked:
        found.setdefault(pid, f"carries {MARKER}")
    return [Leftover(pid, _command(pid), why) for pid, why in sorted(found.items())]


def _kill(leftovers: list[Leftover]) -> None:
    for leftover in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leftover.pid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_WAIT_SECONDS
    while time.monotonic() < deadline:
        alive = [p for p in leftovers if (s := process_stat(str(p.pid))) and s[1] not in ("Z", "X")]
        if not alive:
            return
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap our own children among them
                pass
        time.sleep(0.02)


@dataclass
class _Session:
    pid: int
    root: Path
    saved_tmpdir: str | None


_SESSION = pytest.StashKey[_Session]()


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin set up its factory
def pytest_configure(config: pytest.Config) -> None:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        factory.getbasetemp()  # pytest's own basetemp stays where pytest keeps it
    pid = os.getpid()
    os.environ[MARKER] = str(pid)
    # A pytest-xdist worker inherits the TMPDIR of the session that started it; its own root
    # goes beside that one, not inside: a path nested twice is too long for the unix sockets
    # chromium and PostgreSQL put in their temp directories (108 bytes at most).
    inherited = Path(tempfile.gettempdir())
    parent = inherited.parent if inherited.name.startswith(_ROOT_PREFIX) else inherited
    root = Path(tempfile.mkdtemp(prefix=f"{_ROOT_PREFIX}{pid}-", dir=parent))
    # Servers run as another user (PostgreSQL refuses root) in directories made here.
    root.chmod(0o711)
    config.stash[_SESSION] = _Session(pid, root, os.environ.get("TMPDIR"))
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_SESSION, None)
    if state is None:
        return
    processes = leftover_processes(state.pid)
    directories = sorted(state.root.iterdir()) if state.root.exists() else []
    _restore_tmpdir(state)
    if processes:
        _kill(processes)
    shutil.rmtree(state.root, ignore_errors=True)
    if not processes and not directories:
        return
    lines = [f"process {p.pid} ({p.why}): {p.command}" for p in processes]
    lines += [f"temp directory: {path.name} (in {state.root})" for path in directories]
    header = "the test session left these behind (now killed and removed):"
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "leaks", red=True, bold=True)
        reporter.write_line(header)
        for line in lines:
            reporter.write_line(f"  {line}")
    else:
        print(header, *lines, sep="\n  ")  # no terminal reporter (-p no:terminal)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """After a green run pytest removed its numbered basetemp: its empty parent goes too.

    (``pytest-of-<user>`` in the system's temp directory; a kept failed run's, another
    session's, or an explicit ``--basetemp``'s parent stays.)
    """
    factory = getattr(config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if hasattr(config, "workerinput") or basetemp is None:
        return  # (a pytest-xdist worker's basetemp is inside its controller's)
    parent = Path(basetemp).parent
    if parent.name.startswith("pytest-of-"):
        with contextlib.suppress(OSError):  # (not empty: something is kept there)
            parent.rmdir()


def _restore_tmpdir(state: _Session) -> None:
    tempfile.tempdir = None
    if state.saved_tmpdir is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = state.saved_tmpdir
