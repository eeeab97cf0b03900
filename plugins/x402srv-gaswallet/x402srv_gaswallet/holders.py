"""Who holds the nonce lease, and whether that process has died on this host.

A holder id is ``<hostname>:<pid>:<random>:<process key>``. The process key
names the process beyond its pid, from Linux's ``/proc``: the boot
(``/proc/sys/kernel/random/boot_id``), the pid and time namespaces (pids and
start times mean something only inside them) and the start time
(``/proc/<pid>/stat``), which tells the holder apart from a later process that
got its pid. A waiter decides:

    holder id                                                 the holder is
    no process key (other systems, older releases)            alive (unknown)
    another hostname, boot or namespace (host, container)     alive (unknown)
    /proc/<pid> gone                                           dead
    /proc/<pid> started at another time (the pid was reused)   dead
    /proc/<pid> a zombie with no thread left                   dead
    otherwise, or anything unreadable                          alive

Only a dead holder's lease is taken over at once (``NonceGate``); "alive"
includes every case it cannot be sure of, whose lease passes on when its TTL
runs out. A dead process sends nothing more, and the next holder's nonce comes
from the chain's pending count, which counts whatever it had sent.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessKey", "holder_id", "is_dead_here"]

_PROC = Path("/proc")


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
        if started is None or not boot or "/" in boot or ":" in boot:
            return None
        return cls(boot, _namespaces(), started[1])


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
    try:
        now = _stat(int(parts[1]))
    except FileNotFoundError:
        return True  # no such process
    except OSError:
        return False
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


def _namespaces() -> str:
    """The pid and time namespaces' inode numbers (``-`` where the kernel has none)."""
    found = []
    for kind in ("pid", "time"):
        try:
            found.append(str(os.stat(_PROC / "self/ns" / kind).st_ino))
        except OSError:
            found.append("-")
    return "-".join(found)
