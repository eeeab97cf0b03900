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
syncs it on every restart, even with ``synchronous = NORMAL``), so a store that
writes seldom paid one on nearly every write: each found the WAL copied back
since the last. The thread therefore checkpoints only once ``MIN_FRAMES``
frames wait to be copied, or when any have waited ``IDLE_SECONDS``: a busy
store still checkpoints every interval, a quiet one about once a second (a
metered call's reservation and settlement otherwise each waited for an fsync,
~4 ms on the bench's disk, before its first byte and its last). It reads how
many frames wait from the WAL-index header at the start of the ``-shm`` file
(``mxFrame``, the frames in the WAL, at byte 16, and ``nBackfill``, those
already copied, at byte 96, in the machine's byte order: sqlite's documented
WAL-index format); a file it cannot read that way is checkpointed every
interval, as before. Durability is
unchanged: a commit is as safe as ``synchronous`` makes it the moment it
returns, whenever its pages are later copied. Workers each run one; sqlite lets
one checkpoint run at a time and the others simply skip a turn.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
import time
from pathlib import Path

__all__ = ["IDLE_SECONDS", "INTERVAL_SECONDS", "MIN_FRAMES", "SAFETY_NET_PAGES", "Checkpointer"]

_log = logging.getLogger("x402srv.store.sqlite")

#: Seconds between two background checkpoints.
INTERVAL_SECONDS = 0.02
#: Frames waiting in the WAL that make the next tick checkpoint.
MIN_FRAMES = 64
#: Seconds after which any frame waiting in the WAL is checkpointed.
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
        except sqlite3.Error as exc:
            _log.warning("sqlite store %s: checkpoint thread not started: %s", self._path, exc)
            return
        shm = self._path.with_name(self._path.name + "-shm")
        last = time.monotonic()
        try:
            while not self._stop.wait(self._interval):
                waiting = waiting_frames(shm)
                now = time.monotonic()
                if waiting == 0 or (
                    waiting is not None and waiting < MIN_FRAMES and now - last < IDLE_SECONDS
                ):
                    continue
                last = now
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:  # busy, or the file went away: try next time
                    _log.debug("sqlite store %s: checkpoint skipped: %s", self._path, exc)
        finally:
            conn.close()


def waiting_frames(shm: Path) -> int | None:
    """Frames in the WAL not yet copied back (see the module docstring); None if unreadable."""
    try:
        with shm.open("rb") as file:
            header = file.read(100)
    except OSError:
        return None
    if len(header) < 100:
        return None
    frames = int.from_bytes(header[16:20], sys.byteorder)
    copied = int.from_bytes(header[96:100], sys.byteorder)
    return max(0, frames - copied)
