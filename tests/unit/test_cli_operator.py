"""The operator commands on a real sqlite store, as a seller reads them (issue 30, item 1).

The store is ``config.example.toml``'s, filled by ``x402srv import`` of a dump
(``tests/support/dumps.py``). ``challenges list`` has a header row and money,
``show`` prints RFC 3339 times, ``grants revoke`` says one line and logs
nothing, ``export``/``import``/``reconcile`` count with plurals and show their
progress: plain lines off a terminal, a bar on one (a real pty).
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dumps import write_dump
from tests.support.paths import REPO
from x402srv.cli.main import main

DEV_SECRET = "dev-secret-for-unit-tests-" + "d" * 32
CONFIG = "config.example.toml"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


@pytest.fixture
def store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    """config.example.toml's sqlite store holding 5 challenges (the first 2 delivered).

    What ``import`` said on stderr is left in ``tmp_path / "imported.txt"``.
    """
    shutil.copy(REPO / CONFIG, tmp_path / CONFIG)
    (tmp_path / ".x402srv-dev-secret").write_text(DEV_SECRET + "\n")
    monkeypatch.chdir(tmp_path)
    ids = write_dump(tmp_path / "dump.jsonl", 5, delivered=2)
    capsys.readouterr()
    assert main(["import", "--config", CONFIG, "--input", "dump.jsonl"]) == 0
    (tmp_path / "imported.txt").write_text(capsys.readouterr().err)
    return ids


def test_import_and_export_count_with_plurals_and_plain_progress(
    store: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    imported = (tmp_path / "imported.txt").read_text().splitlines()
    assert imported == [
        "import: reading and checking",
        "import: writing",
        "imported 5 challenges",
    ]
    assert main(["export", "--config", CONFIG, "--output", "again.jsonl"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "export: writing items",
        "exported 5 challenges",
    ]


def test_challenges_list_has_a_header_row_and_shows_money(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["challenges", "list", "--config", CONFIG]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["CHALLENGE", "STATE", "PLAN", "AMOUNT", "UPDATED", "REQUEST"]
    assert [row.split()[0] for row in rows] == store
    assert all("  0.10 USDC ($0.10)  " in row for row in rows)
    assert header.index("UPDATED") == rows[0].index(RFC3339.search(rows[0]).group())  # type: ignore[union-attr]


def test_challenges_show_prints_rfc3339_times(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["challenges", "show", store[0], "--config", CONFIG]) == 0
    shown = json.loads(capsys.readouterr().out)
    for key in ("created_at", "expires_at", "updated_at"):
        assert RFC3339.fullmatch(shown[key]), (key, shown[key])
    assert all(RFC3339.fullmatch(step["at"]) for step in shown["history"])
    assert (shown["amount"], shown["amount_shown"]) == ("100000", "0.10 USDC ($0.10)")
    assert shown["grant"]["accessToken"] == "<redacted>"


def test_grants_revoke_says_one_line_and_logs_nothing(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grants", "revoke", store[0], "--config", CONFIG, "--reason", "chargeback"]) == 0
    out, err = capsys.readouterr()
    assert out == (
        f"revoked {store[0]} (hourly, paid 0.10 USDC ($0.10)): its tokens are refused from now "
        "on; reason: chargeback\n"
    )
    assert err == ""
    assert main(["grants", "revoke", store[0], "--config", CONFIG]) == 0
    assert capsys.readouterr() == (f"{store[0]} was already revoked: nothing changed\n", "")


def test_reconcile_counts_with_plurals(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The dump is from 2023: every record is past its retention. The two finished ones are
    pruned; the three PENDING ones expire (a PENDING record is never pruned as it is: it
    may hold a payment given back, docs/operations.md), to be pruned a retention later."""
    assert main(["reconcile", "--config", CONFIG]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "reconcile: settling what requests left behind"
    assert err[-1] == "reconciled: 3 changed, 0 unresolved, 2 records and 0 tasks pruned"


def test_challenges_show_piped_to_head_ends_quietly(store: list[str]) -> None:
    """``x402srv challenges show ID | head -3``: no BrokenPipeError traceback (git's 141)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write, as after head's last line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "x402srv", "challenges", "show", store[0], "--config", CONFIG],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


def test_export_shows_a_progress_bar_on_a_terminal(store: list[str], tmp_path: Path) -> None:
    """stderr a terminal (a real pty): rich's bar, full at the end, then the summary."""
    main_fd, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "x402srv", "export", "--config", CONFIG, "--output", "e.jsonl"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
        )
        os.close(terminal)
        seen = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            seen += chunk
        assert process.wait(30) == 0
    finally:
        os.close(main_fd)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", seen.decode())
    assert "━" in text
    assert "5 of 5 items 100%" in text
    assert text.rstrip().endswith("exported 5 challenges")
