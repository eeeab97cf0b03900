"""``x402srv demo``: run the steps, then stop everything it started, whatever happens.

The stack is stopped in ``finally``: after success, a failed step, Ctrl-C
(KeyboardInterrupt) and SIGTERM/SIGHUP (turned into ``Interrupted`` so the
``finally`` runs; Python's default would exit without it). While stopping, those
signals are ignored, so a second Ctrl-C cannot leave half the stack behind. Only
SIGKILL of the demo itself can, since nothing can run after it.
"""

from __future__ import annotations

import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TextIO

import httpx

from x402srv.demo.accounts import demo_accounts
from x402srv.demo.keep import instructions
from x402srv.demo.stack import DemoStack
from x402srv.demo.steps import (
    Balances,
    DemoFailed,
    buy_plan,
    call_api,
    describe_stack,
    replay,
    start_chain,
)
from x402srv.devchain import DevchainError

__all__ = ["Interrupted", "run"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(Exception):
    """SIGTERM or SIGHUP arrived: stop the stack and exit with 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def _let_signals_in() -> None:
    """A Python call: a signal that arrived meanwhile has its handler run here, at the latest.

    Ctrl-C reaches anvil too (one process group): the demo may see anvil gone
    (a refused connection) before its own handler has run, and must not call
    that a failure.
    """


@contextmanager
def _signals_raise() -> Iterator[None]:
    # SIGINT too: asyncio.run would otherwise put in its own handler, which cancels
    # the running step, and the error it ends with could be taken for a failure.
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def project_dir() -> Path:
    """Where anvil is looked for and installed: the checkout x402srv runs from, else the cwd."""
    checkout = Path(__file__).resolve().parents[2]  # x402srv/demo/run.py
    return checkout if (checkout / "package.json").is_file() else Path.cwd()


def run(*, keep: bool = False, out: TextIO | None = None) -> int:
    """The whole demo; returns the exit code (0, 1 on a failure, 130/143 when interrupted)."""
    stream = out or sys.stdout
    # The SDK logs each signature at INFO; the demo prints what matters itself.
    logging.getLogger("x402").setLevel(logging.WARNING)

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    say("x402srv demo: a buyer agent pays for API access on a local chain, end to end.\n")
    directory = Path(tempfile.mkdtemp(prefix="x402srv-demo-"))
    stack = DemoStack(directory, demo_accounts())
    kept = False
    try:
        with _signals_raise():
            kept = _steps(stack, say, keep=keep)
        return 0
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    except Interrupted as exc:
        say(f"\ninterrupted by {exc}")
        return 128 + exc.signum
    except Exception as exc:  # report it with the servers' logs; ``finally`` stops them
        try:
            with _signals_raise():
                _let_signals_in()
        except Interrupted as stopped:  # the failure came from the stop signal itself
            say(f"\ninterrupted by {stopped}")
            return 128 + stopped.signum
        expected = isinstance(exc, DemoFailed | DevchainError | RuntimeError | httpx.HTTPError)
        say(f"\ndemo failed: {exc if expected else f'{type(exc).__name__}: {exc}'}")
        logs = stack.logs()
        if logs:
            say(logs)
        return 1
    finally:
        if not kept:
            _stop(stack, directory, say)


def _steps(stack: DemoStack, say: Callable[[str], None], *, keep: bool) -> bool:
    """Run every step; True when the stack was handed over to the user (``--keep``)."""
    chain = start_chain(stack, project_dir(), say)
    server, api = stack.start_servers()
    describe_stack(stack, server, api, say)
    before = Balances.read(chain, stack)
    grant = buy_plan(chain, stack, server, say)
    call_api(api, grant, say)
    replay(server, grant, say)
    before.show(Balances.read(chain, stack), say)
    if not keep:
        return False
    # Everything that could fail comes first: once detached, nothing here stops the stack.
    text = instructions(stack, chain, server, api, grant["requestId"], stack.pids())
    with _signals_ignored():
        stack.detach()
        say(text)
    return True


def _stop(stack: DemoStack, directory: Path, say: Callable[[str], None]) -> None:
    with _signals_ignored():
        stopped = stack.stop()
        shutil.rmtree(directory, ignore_errors=True)
    names = ", ".join(f"{name} (pid {pid})" for name, pid in stopped)
    say(f"\nstopped {names or 'nothing'}; removed {directory}")
