"""How the operator commands talk: counted nouns, progress, and a closed pipe.

- ``counted(3, "challenge")`` is "3 challenges", ``counted(1, "task")`` "1 task":
  a summary line reads as a sentence.
- ``Progress``: a long command (``export``, ``import``, ``reconcile``) shows a
  bar on a terminal (``rich``, on stderr, as pip does) and, when stderr is not
  a terminal (a cron job, a CI log), a plain line every ``PLAIN_EVERY`` items
  and at each phase: never a control character in a log file.
- ``quiet_broken_pipe``: ``x402srv challenges list | head`` ends quietly, as
  ``git log | head`` does. The reader is gone, so nothing more is written
  (stdout is pointed at ``/dev/null`` so the interpreter's last flush cannot
  fail either) and the exit status is git's, 128 + SIGPIPE.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any, Self

__all__ = ["BROKEN_PIPE_STATUS", "PLAIN_EVERY", "Progress", "counted", "quiet_broken_pipe"]

#: Items between two plain progress lines (no terminal).
PLAIN_EVERY = 10_000
#: Exit status after the reader of stdout went away (a shell's 128 + SIGPIPE).
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE

#: Nouns whose plural is not the singular with an "s".
_NOUNS = {"entry": ("entry", "entries")}


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1, thousands separated: "1,200 challenges"."""
    one, many = _NOUNS.get(noun, (noun, noun + "s"))
    return f"{n:,} {one if n == 1 else many}"


class Progress:
    """``with Progress("export", "items") as progress: progress.update(done, total, phase)``.

    ``total`` may stay ``None`` (an export does not know how many items a store
    holds until it has read them): the bar then pulses and shows the count and
    the rate. Updates are cheap enough to call per item: the terminal is
    redrawn by rich's own timer, a plain line only every ``PLAIN_EVERY``.
    """

    def __init__(
        self,
        command: str,
        noun: str,
        *,
        stream: IO[str] | None = None,
        terminal: bool | None = None,
    ) -> None:
        self.command = command
        self.noun = noun
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._phase = ""
        self._next_line = PLAIN_EVERY
        self._bar: Any = None
        self._task: Any = None
        self._started = time.monotonic()

    def __enter__(self) -> Self:
        if self.terminal:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                SpinnerColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                SpinnerColumn(finished_text="[green]✓[/green]"),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
            )
            self._bar.start()
            self._task = self._bar.add_task(self.command, total=None, rate="", count="")
        return self

    def update(self, done: int, total: int | None = None, phase: str | None = None) -> None:
        """``done`` of ``total`` items (of this phase, when ``phase`` names one)."""
        if phase is not None and phase != self._phase:
            self._phase = phase
            self._next_line = PLAIN_EVERY
            if not self.terminal:
                self._line(f"{self.command}: {phase}")
        if self._bar is not None:
            elapsed = max(time.monotonic() - self._started, 1e-6)
            described = f"{self.command}: {self._phase}" if self._phase else self.command
            self._bar.update(
                self._task,
                completed=done,
                total=total,
                description=described,
                count=f"{done:,} of {total:,} {self.noun}" if total else f"{done:,} {self.noun}",
                rate=f"{done / elapsed:,.0f}/s",
            )
            return
        if done >= self._next_line:
            of = f" of {total:,}" if total else ""
            self._line(f"{self.command}: {done:,}{of} {self.noun}")
            self._next_line = (done // PLAIN_EVERY + 1) * PLAIN_EVERY

    def callback(self) -> Callable[[int, int | None, str | None], None]:
        return self.update

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            if kind is None:  # a finished bar is full, even where the total was never known
                done = int(self._bar.tasks[0].completed)
                self.update(done, done or 1)
            self._bar.stop()


def quiet_broken_pipe() -> int:
    """After a ``BrokenPipeError`` on stdout: write nothing more, and exit as git does (141)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return BROKEN_PIPE_STATUS
