"""Reference pages generated from the code, so they cannot drift from it (run by cog).

``docs/errors.md`` and ``docs/cli.md`` hold ``[[[cog ... ]]]`` blocks that call
these functions; ``./run test`` runs ``cog --check`` (a page that differs from
what the code generates fails the build) and ``cog -r`` rewrites them::

    ./run docs    # (cog -r -I docs on each page listed in COGGED in ./run)

Everything here is deterministic: the order is the code's, the help text is
formatted at a fixed width.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import os
import textwrap
from collections.abc import Iterator

from x402srv import errors, interfaces
from x402srv.cli.parser import build_parser as _parser

__all__ = [
    "cli_commands",
    "cli_summary",
    "config_errors",
    "error_table",
    "plugins_listing",
    "protocol_source",
    "reasons",
]

#: The width argparse formats help at (it reads COLUMNS), whatever the terminal.
HELP_COLUMNS = "96"


def _rst_to_markdown(text: str) -> str:
    return text.replace("``", "`")


def _summary(cls: type) -> str:
    """The first paragraph of a class docstring, on one line."""
    if cls.__doc__ is None:  # (class docstrings are not inherited)
        raise ValueError(f"{cls.__name__} needs a docstring of its own: it is a row of the table")
    paragraph = inspect.cleandoc(cls.__doc__).split("\n\n", 1)[0]
    return _rst_to_markdown(" ".join(paragraph.split()))


def _problem_errors() -> list[type[errors.ProblemError]]:
    """Every answerable error class ``x402srv.errors`` exports, by status, then tree order."""
    found = [
        cls
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type)
        and issubclass(cls, errors.ProblemError)
        and cls is not errors.ProblemError
    ]
    order = {cls: line for line, cls in enumerate(_tree_order())}
    return sorted(found, key=lambda cls: (cls.status, order.get(cls, len(order))))


def _tree_order() -> Iterator[type]:
    def walk(cls: type) -> Iterator[type]:
        yield cls
        subclasses: list[type] = cls.__subclasses__()
        for sub in subclasses:
            if sub.__module__ == errors.__name__:
                yield from walk(sub)

    return walk(errors.ProblemError)


def error_table() -> str:
    """status | code | title | when: one row per ``ProblemError`` subclass."""
    rows = ["| status | code | title | class | when |", "|---|---|---|---|---|"]
    for cls in _problem_errors():
        rows.append(
            f"| {cls.status} | `{cls.code}` | {cls.title} | `{cls.__name__}` | {_summary(cls)} |"
        )
    return "\n".join(rows) + "\n"


def config_errors() -> str:
    """The seller's errors: never answered to a client, they stop the server (exit code 2)."""
    rows = ["| class | when |", "|---|---|"]
    for cls in (errors.ConfigError, errors.PluginNotFound):
        rows.append(f"| `{cls.__name__}` | {_summary(cls)} |")
    return "\n".join(rows) + "\n"


def _commands(
    parser: argparse.ArgumentParser, prefix: str
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(command line, help, parser) for every sub-command, depth first, in parser order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                line = f"{prefix} {name}"
                yield line, helps.get(name, ""), sub
                yield from _commands(sub, line)


def cli_summary() -> str:
    """command | what it does: one row per command and sub-command."""
    rows = ["| command | what it does |", "|---|---|"]
    for line, text, _ in _commands(_parser(), "x402srv"):
        rows.append(f"| [`{line}`](#{line.replace(' ', '-')}) | {text} |")
    return "\n".join(rows) + "\n"


def cli_commands() -> str:
    """Each command's ``--help``, exactly as ``x402srv <command> --help`` prints it."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parts = ["```text\n" + _parser().format_help() + "```\n"]
        for line, _, sub in _commands(_parser(), "x402srv"):
            level = "#" * (line.count(" ") + 1)  # x402srv audit: ##, x402srv challenges list: ###
            parts.append(f"{level} {line}\n\n```text\n{sub.format_help()}```\n")
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(parts)


def protocol_source(name: str) -> str:
    """The source of one of ``x402srv.interfaces``' Protocols, as a python block."""
    cls = getattr(interfaces, name)
    return "```python\n" + textwrap.dedent(inspect.getsource(cls)) + "```\n"


def plugins_listing() -> str:
    """What ``x402srv plugins`` prints with this repository's packages installed."""
    from x402srv.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plugins"])
    return "```text\n$ x402srv plugins\n" + out.getvalue() + "```\n"


def reasons() -> str:
    """The x402 reason strings a ``402 PAYMENT_FAILED`` carries, in their module's order."""
    from x402srv.plugin import Reason

    return ", ".join(f"`{reason.value}`" for reason in Reason) + "\n"
