"""Who holds the nonce lease, and whether that process has died on this host.

A holder id is ``<hostname>:<pid>:<random>:<process key>``. The process key
names the process beyond its pid, from Linux's ``/proc``: the boot
(``/proc/sys/kernel/random/boot_id``), the pid and time namespaces (pids and
start times mean something only inside them) and the start time
(``/proc/<pid>/stat``), which tells the holder apart from a later process that
got its pid. A waiter decides:

    holder id                                                 the holder is
    no process key (other systems, older releases)            alive (unknown)
    our own pid namespace unreadable (no key of ours)         alive (unknown)
    another hostname, boot or namespace (host, container)     alive (unknown)
    kill(pid, 0): no such process (ESRCH)                      dead
    /proc/<pid> started at another time (the pid was reused)   dead
    /proc/<pid> a zombie with no thread left                   dead
    otherwise, or anything unreadable                          alive

Whether the pid exists is the kernel's answer to ``kill(pid, 0)``, never a
missing ``/proc/<pid>``: with ``/proc`` mounted ``hidepid=2`` (systemd's
``ProtectProc=invisible``, ``DynamicUser``) another user's live process has no
entry there, and ``kill`` answers EPERM for it. ``/proc`` only tells a reused
pid or a zombie apart; where it cannot be read the holder is alive.

Only a dead holder's lease is taken over (``NonceGate``, once the lease is
older than an RPC request may last); "alive" includes every case it cannot be
sure of, whose lease passes on when its TTL runs out.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessKey", "holder_id", "is_dead_here"]

_PROC = Path("/proc")
_NAMESPACES = _PROC / "self/ns"


@dataclass(frozen=True, slots=True)
class ProcessKey:
    """A process as this host's ``/proc`` knows it: which boot, namespaces, and start."""

    boot: str
    namespaces: str
    started: int

    def __str__(self) -> str:
        return f"{self.boot}/{self.namespaces}/{self.started}"

    @classmethod
    def parse(cls, text: str) -> ProcessKey | None:
        parts = text.split("/")
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))

    @classmethod
    def of_this_process(cls) -> ProcessKey | None:
        """This process's key; ``None`` when ``/proc`` cannot vouch for its pids.

        ``/proc/self`` must name our own pid: a ``/proc`` mounted for another pid
        namespace would answer for other processes under the same numbers.
        """
        try:
            if os.readlink(_PROC / "self") != str(os.getpid()):
                return None
            boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip()
            started = _stat(os.getpid())
        except OSError:
            return None
        namespaces = _namespaces()
        # (an unreadable pid namespace would let two containers' pids pass for each other)
        if started is None or namespaces is None or not boot or "/" in boot or ":" in boot:
            return None
        return cls(boot, namespaces, started[1])


def holder_id() -> str:
    """A new holder id for this process (one per ``NonceGate``)."""
    base = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    key = ProcessKey.of_this_process()
    return base if key is None else f"{base}:{key}"


def is_dead_here(holder: str) -> bool:
    """Whether ``holder`` names a process of this host that has died (see the table above)."""
    parts = holder.split(":")
    if len(parts) != 4 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    theirs, ours = ProcessKey.parse(parts[3]), ProcessKey.of_this_process()
    if theirs is None or ours is None:
        return False
    if (theirs.boot, theirs.namespaces) != (ours.boot, ours.namespaces):
        return False
    pid = int(parts[1])
    try:
        os.kill(pid, 0)  # sends nothing: asks the kernel whether the pid exists
    except ProcessLookupError:
        return True  # no such process
    except OSError:
        return False  # EPERM: another user's live process; anything else: unknown
    try:
        now = _stat(pid)
    except OSError:
        return False  # hidden (hidepid) or gone since: the next look decides
    if now is None:
        return False
    state, started, threads = now
    return started != theirs.started or (state in ("Z", "X") and threads <= 1)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """State, start time and thread count from ``/proc/<pid>/stat``; None if unparsable."""
    text = (_PROC / str(pid) / "stat").read_text()
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19]), int(fields[17])
    except (IndexError, ValueError):
        return None


def _namespaces() -> str | None:
    """The pid and time namespaces' inode numbers; None when the pid one cannot be read.

    A kernel without time namespaces (before 5.6) has no ``time`` entry: ``-``,
    as for every process of that kernel.
    """
    try:
        pid = os.stat(_NAMESPACES / "pid").st_ino
    except OSError:
        return None
    try:
        time = str(os.stat(_NAMESPACES / "time").st_ino)
    except FileNotFoundError:
        time = "-"
    except OSError:
        return None
    return f"{pid}-{time}"
