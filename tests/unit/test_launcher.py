"""The test launcher forks x402srv and the local facilitator from one warm zygote.

A forked child must be what ``python -m PROGRAM ARGS`` would be: its own process
(here, the zygote's command line, not a fresh interpreter's), serving, and gone
once its process group is killed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from x402srv.testing import launcher
from x402srv.testing.fixtures import FacilitatorProcess


def test_the_local_facilitator_is_forked_from_the_warm_zygote(
    facilitator: Callable[..., FacilitatorProcess],
) -> None:
    assert launcher.WARM  # set by the root conftest for the session
    started = facilitator()
    process = started.process
    assert isinstance(process, launcher.Launched)
    command = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
    assert b"x402srv.testing.zygote" in command
    assert os.getpgid(process.pid) == process.pid  # its own session, as Popen's would be
    supported = httpx.get(f"{started.url}/supported").json()
    assert any(kind["network"] == "eip155:31337" for kind in supported["kinds"])
    started.stop()
    assert process.poll() is not None


def test_x402srv_itself_is_still_the_default_program(tmp_path: Path) -> None:
    done = launcher.run(["--version"], cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0
    assert done.stdout.startswith("x402srv ")
