"""The ``x402srv`` command as a newcomer first meets it (issue 30, item 1 and item 5).

No arguments print the help listing every command; ``--version`` names the
core and each installed plugin; a word that is not a command is an error
naming the closest one (it no longer falls into ``serve``); the docs' example
plugins are marked as examples; a reader that closes the pipe early (``| head``)
ends the command quietly, as git does. In process through ``main`` where the
answer is printed text, in a real subprocess where the file descriptors matter.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import x402srv
from x402srv.cli.main import main
from x402srv.cli.parser import COMMANDS
from x402srv.cli.versions import EXAMPLE_NOTE, plugin_distributions


def test_no_arguments_print_the_help_listing_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: x402srv <command> [options]")
    block = out.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    listed = [line.split()[0] for line in block.splitlines() if not line.startswith("    ")]
    assert listed == list(COMMANDS)
    assert "--version" in out
    assert "required: --config" not in out


def test_version_names_the_core_and_each_installed_plugin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"x402srv {x402srv.__version__} (Python ")
    dists = plugin_distributions()
    assert {d.name for d in dists} >= {"x402srv-gaswallet", "x402srv-redis", "x402srv-postgres"}
    for dist in dists:
        [line] = [line for line in lines if line.startswith(f"  {dist.name} {dist.version}: ")]
        assert line.endswith(f"({EXAMPLE_NOTE})") == (dist.name == "x402srv-example")


@pytest.mark.parametrize(
    ("argv", "word", "hint"),
    [
        (["xyzzy", "--help"], "xyzzy", None),  # no serve help, no exit 0
        (["refund", "list"], "refund", "'refunds'"),
        (["chalenges", "list"], "chalenges", "'challenges'"),
        (["exprot"], "exprot", "'export'"),
        (["challenges", "shwo", "x"], "shwo", "'show'"),
        (["challenges", "list", "--config", "x.toml", "--state", "PENDNG"], "PENDNG", "'PENDING'"),
    ],
)
def test_an_unknown_word_is_an_error_naming_the_closest(
    argv: list[str], word: str, hint: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{word!r} is not a" in err
    if hint is None:
        assert "did you mean" not in err
    else:
        assert f"(did you mean {hint}?)" in err
    assert "--host" not in err  # serve's usage is not what a typo gets


def test_a_commands_help_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: ``x402srv refunds --help`` printed serve's help; it is the refunds' now."""
    with pytest.raises(SystemExit) as done:
        main(["refunds", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: x402srv refunds ")
    assert "--host" not in out


def test_an_option_first_still_serves(capsys: pytest.CaptureFixture[str]) -> None:
    """``x402srv --config seller.toml`` serves (docs/cli.md): only its usage says so here."""
    with pytest.raises(SystemExit) as done:
        main(["--port", "8402"])
    assert done.value.code == 2
    assert "x402srv serve: error: the following arguments are required: --config" in (
        capsys.readouterr().err
    )


def test_plugins_marks_the_docs_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    marked = [line for line in lines if line.endswith(f"({EXAMPLE_NOTE})")]
    assert marked == [line for line in lines if "(x402srv-example " in line]
    assert len(marked) == 3  # the audit store, the relayer settler, the key-service issuer


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m x402srv ARGS`` writing to a pipe whose reader is already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "x402srv", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [("plugins",), ("--version",)])
def test_a_reader_that_went_away_ends_the_command_quietly(args: tuple[str, ...]) -> None:
    """``x402srv plugins | head -1``: no BrokenPipeError traceback; git's status (128 + 13)."""
    done = closed_pipe_run(*args)
    assert done.stderr == ""
    assert done.returncode == 141
