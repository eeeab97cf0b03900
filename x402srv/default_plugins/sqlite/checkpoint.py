"""WAL checkpoints for the sqlite store, on a thread of their own.

In WAL mode every commit appends pages to the ``-wal`` file; a checkpoint copies
them back into the database and syncs both files. By default sqlite runs one
inside whichever commit pushes the WAL past 1000 pages, so every few hundred
challenges one unlucky batch of inserts waited for a copy and an fsync, and
every request queued behind it with it: that was most of the 402's p99 and a
quarter of its throughput.

Here the store's own connection checkpoints only as a safety net
(``SAFETY_NET_PAGES``, if this thread ever stops keeping up), and this thread,
with a connection of its own, runs a PASSIVE checkpoint every
``INTERVAL_SECONDS``. A PASSIVE checkpoint never blocks writers or readers: it
copies what it can while the store's thread keeps committing, and once it has
copied everything the next commit starts the WAL over from the beginning, so the
file stays about as large as the writes of one interval.

Starting the WAL over costs its writer an fsync of the WAL's header (sqlite
syncs it on every restart, even with ``synchronous = NORMAL``), so checkpointing
every interval whatever waited made nearly every write of a quiet store such a
restart (a metered call's reservation and its settlement each waited ~4 ms for
the disk before its first byte and its last). The store therefore tells this
thread how many operations it ran (``ran``), and the thread checkpoints once
``MIN_OPERATIONS`` ran since the last checkpoint, or any did ``IDLE_SECONDS``
ago (``due``): a busy store still checkpoints every interval, a quiet one about
once a second. (It counts in the process: opening the ``-shm`` file to read the
WAL's size would release sqlite's POSIX locks, which belong to the process.)

Once a checkpoint has copied the whole WAL, this thread also starts the WAL
over itself (``restart_wal``): a write of its own that changes nothing (it
writes the file's ``application_id`` back) takes the header's fsync,
so the store's next commit (a metered call's reservation, on the path to its
first byte) appends to a WAL already started over instead of waiting for the
disk (the reservation's median commit on a quiet store went from 1.0 to 0.46 ms
when a checkpoint preceded it). Durability is unchanged: a commit is as safe as
``synchronous`` makes it the moment it returns, whenever its pages are later
copied. Workers each run one; sqlite lets one checkpoint run at a time and the
others simply skip a turn.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

__all__ = [
    "IDLE_SECONDS",
    "INTERVAL_SECONDS",
    "MIN_OPERATIONS",
    "SAFETY_NET_PAGES",
    "Checkpointer",
    "checkpoint",
    "restart_wal",
]

_log = logging.getLogger("x402srv.store.sqlite")

#: Seconds between two background checkpoints.
INTERVAL_SECONDS = 0.02
#: Store operations since the last checkpoint that make the next tick checkpoint.
MIN_OPERATIONS = 32
#: Seconds after which any operation since the last checkpoint makes a tick checkpoint.
IDLE_SECONDS = 1.0
#: ``wal_autocheckpoint`` of the store's connection: only if the thread falls behind.
SAFETY_NET_PAGES = 10_000


class Checkpointer:
    """``start()`` after the store opened its file, ``stop()`` before it closes it."""

    def __init__(self, path: Path, *, interval: float = INTERVAL_SECONDS) -> None:
        self._path = path
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._operations = 0  # since the last checkpoint (written by the store's thread)
        self._last = time.monotonic()

    def ran(self, operations: int = 1) -> None:
        """The store's thread ran ``operations`` (a batch counts each of its writes)."""
        self._operations += operations

    def due(self, now: float) -> bool:
        """Whether the tick at ``now`` (monotonic) checkpoints (see the module docstring)."""
        if self._operations >= MIN_OPERATIONS:
            return True
        return self._operations > 0 and now - self._last >= IDLE_SECONDS

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="x402srv-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout=5)

    def _run(self) -> None:
        try:
            # No busy timeout: a checkpoint that finds another one running skips a turn.
            conn = sqlite3.connect(self._path, timeout=0, isolation_level=None)
            # (its one write, ``restart_wal``, stores nothing: no fsync of its own commit)
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            _log.warning("sqlite store %s: checkpoint thread not started: %s", self._path, exc)
            return
        try:
            while not self._stop.wait(self._interval):
                now = time.monotonic()
                if not self.due(now):
                    continue
                self._operations, self._last = 0, now  # (an increment racing this: one more)
                try:
                    checkpoint(conn)
                except sqlite3.Error as exc:  # busy, or the file went away: try next time
                    _log.debug("sqlite store %s: checkpoint skipped: %s", self._path, exc)
        finally:
            conn.close()


def checkpoint(conn: sqlite3.Connection) -> None:
    """One PASSIVE checkpoint; when it copied the whole WAL, start the WAL over here."""
    busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if busy == 0 and frames > 0 and copied == frames:
        restart_wal(conn)


def restart_wal(conn: sqlite3.Connection) -> None:
    """A write that changes nothing, so that this connection's commit restarts the WAL.

    The first commit after a complete checkpoint writes the WAL's header again
    and syncs it; this one is that commit. It is one statement in autocommit
    mode, which takes the write lock, writes and commits inside a single call
    that does not hold the GIL. A transaction of several statements on this
    thread held the write lock while it waited for the GIL between them, up to
    the interpreter's switch interval (5 ms) each time on a busy event loop: the
    loop's own steps then found the lock taken (about one in ten of a metered
    stream bench's), and queued behind it for the store's thread, where the same
    wait held the lock again (docs/performance.md, "The sqlite store's write
    lock"). The header field it writes back, ``application_id``, is x402srv's
    to keep and nothing else writes it, unlike ``user_version``, which a
    migration could move between the read and the write. Without a busy
    timeout, a writer holding the lock wins and restarts the WAL itself
    (``sqlite3.OperationalError``: skipped this turn).
    """
    (application_id,) = conn.execute("PRAGMA application_id").fetchone()
    conn.execute(f"PRAGMA application_id = {int(application_id)}")
