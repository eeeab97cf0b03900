"""The session-end leak check (``tests/support/leaks.py``) fails a run that leaves anything.

Each test runs a real pytest session in a subprocess on a tiny test file, with
the check loaded as the repository loads it (``-p tests.support.leaks``), and
then looks for itself: the leaked process must be dead and the leaked directory
gone after the run, not only reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.leaks import MARKER, leftover_processes

REPO = Path(__file__).resolve().parents[2]


def run_session(tmp_path: Path, test_source: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_tiny.py").write_text(test_source)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.leaks",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--basetemp={tmp_path / 'basetemp'}",
            "--rootdir",
            str(tmp_path),
            "-q",
            str(tmp_path / "test_tiny.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def pids_in(output: str, word: str) -> list[int]:
    """The pids the tiny test printed as ``<word>=<pid>``."""
    return [int(line.split("=", 1)[1]) for line in output.splitlines() if line.startswith(word)]


def test_a_clean_session_passes(tmp_path: Path) -> None:
    """The control: a session that starts a process and waits for it, and uses tmp_path."""
    done = run_session(
        tmp_path,
        "import subprocess, tempfile, shutil\n"
        "def test_clean(tmp_path):\n"
        "    subprocess.run(['true'], check=True)\n"
        "    shutil.rmtree(tempfile.mkdtemp(prefix='x402srv-clean-'))\n"
        "    (tmp_path / 'kept-by-pytest').write_text('x')\n",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "leaks" not in done.stdout


def test_a_session_that_leaks_a_child_process_fails_and_the_process_is_killed(
    tmp_path: Path,
) -> None:
    done = run_session(
        tmp_path,
        "import subprocess\n"
        "def test_leaks_a_child():\n"
        "    child = subprocess.Popen(['sleep', '300'])\n"
        "    print(f'CHILD={child.pid}', flush=True)\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout  # the test itself passed: the run fails for the leak
    assert "child of the session): sleep 300" in done.stdout
    # -q does not show a passing test's print: find the pid in the report instead.
    [line] = [x for x in done.stdout.splitlines() if "sleep 300" in x]
    pid = int(line.split("process ", 1)[1].split(" ", 1)[0])
    assert not alive(pid)


def test_a_session_that_leaks_a_daemon_fails_and_the_daemon_is_killed(tmp_path: Path) -> None:
    """A double fork re-parents the process to init: only the environment marker finds it."""
    done = run_session(
        tmp_path,
        "import pathlib, subprocess, time\n"
        "def test_leaks_a_daemon():\n"
        "    out = subprocess.run(['sh', '-c', 'sleep 301 >/dev/null 2>&1 & echo $!'],\n"
        "                         check=True, capture_output=True, text=True).stdout\n"
        "    pid = int(out)\n"
        "    cmdline = pathlib.Path(f'/proc/{pid}/cmdline')\n"
        "    while not cmdline.read_bytes().startswith(b'sleep'):  # until it exec'd\n"
        "        time.sleep(0.01)\n"
        "    pathlib.Path('daemon.pid').write_text(str(pid))\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    pid = int((tmp_path / "daemon.pid").read_text())
    assert f"process {pid} (carries {MARKER}): sleep 301" in done.stdout
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:  # init reaps it in its own time
        time.sleep(0.02)
    assert not alive(pid)


def test_a_session_that_leaks_a_temp_directory_fails_and_the_directory_is_removed(
    tmp_path: Path,
) -> None:
    done = run_session(
        tmp_path,
        "import tempfile\n"
        "def test_leaks_a_directory():\n"
        "    path = tempfile.mkdtemp(prefix='x402srv-pg-tls-')\n"
        "    open(path + '/client.key', 'w').write('a private key')\n"
        "    print(f'DIR={path}')\n",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    [line] = [x for x in done.stdout.splitlines() if "temp directory: x402srv-pg-tls-" in x]
    root = Path(line.rsplit("(in ", 1)[1].rstrip(")"))
    leaked = root / line.split("temp directory: ", 1)[1].split(" ", 1)[0]
    assert not leaked.exists()
    assert not root.exists()  # the session's temp root goes too


def test_the_check_is_cheap() -> None:
    """One pass over /proc: the suite pays well under a second for it."""
    started = time.perf_counter()
    leftover_processes(os.getpid())
    assert time.perf_counter() - started < 0.5
