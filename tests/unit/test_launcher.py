"""The test launcher forks x402srv and the local facilitator from one warm zygote.

A forked child must be what ``python -m PROGRAM ARGS`` would be: its own process
(here, the zygote's command line, not a fresh interpreter's), serving, and gone
once its process group is killed.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.paths import REPO
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


def test_a_child_with_a_longer_pythonpath_than_the_zygotes_still_has_the_standard_library(
    tmp_path: Path,
) -> None:
    """A child's ``sys.path``: its cwd, its PYTHONPATH, then the interpreter's own entries.

    The zygote cut off the front of its own path as many entries as the CHILD's
    PYTHONPATH had (it read ``os.environ`` once the child's environment had replaced
    it): a child given two entries more than the zygote lost the standard library's
    directory, and every module the zygote had not imported with it. A seller
    started with ``tests.support.faults.leaving_at_the_end``'s environment ran
    ``challenges show`` into ``ModuleNotFoundError: No module named 'sqlite3'``.
    """
    assert launcher.WARM  # (a fresh interpreter sets its path itself)
    shutil.copy(REPO / "config.example.toml", tmp_path / "config.example.toml")
    (tmp_path / ".x402srv-dev-secret").write_text("d" * 64 + "\n")
    pythonpath = os.pathsep.join(str(tmp_path / name) for name in ("one", "two", "three"))
    done = launcher.run(
        ["challenges", "show", str(uuid.uuid4()), "--config", "config.example.toml"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": pythonpath},
    )
    assert "Traceback" not in done.stderr, done.stderr  # (the sqlite store imports sqlite3)
    assert done.stderr.startswith("x402srv: no challenge "), done.stderr
