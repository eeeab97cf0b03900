"""The ``x402srv`` command's parser: every command, its options, and what a typo gets.

Shaped like the tools a seller already knows (``git``, ``docker``, ``pip``):
no arguments print the help, ``--version`` names the core and every installed
plugin, and a word that is not a command is an error naming the closest one
(``difflib``), at every level (``challenges shwo``, ``--state PENDNG``). A first
argument that is an option still serves (``x402srv --config seller.toml``, as
docs/cli.md says), so only ``-h``, ``--help`` and ``--version`` stay at the top.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Generator, Sequence
from typing import Any, NoReturn

from x402srv.access.records import State
from x402srv.cli import refunds as refunds_cli

__all__ = ["COMMANDS", "TOP_LEVEL_OPTIONS", "Parser", "build_parser", "closest"]

COMMANDS = (
    "serve",
    "check",
    "plugins",
    "migrate",
    "export",
    "import",
    "reconcile",
    "challenges",
    "grants",
    "refunds",
    "export-sales",
    "audit",
    "demo",
)
#: Options that belong to ``x402srv`` itself; any other first option is serve's.
TOP_LEVEL_OPTIONS = ("-h", "--help", "--version")


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice ``word`` was most likely meant to be, if any is close enough."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None


class Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" on every refused choice (sub-parsers inherit it)."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(choice) for choice in choices]
        hint = closest(str(value), names)
        where = "command" if isinstance(action, argparse._SubParsersAction) else "choice"
        text = f"{value!r} is not a {where}"
        text += f" (did you mean {hint!r}?)" if hint else ""
        raise argparse.ArgumentError(action, f"{text}; choose from {', '.join(names)}")

    def error(self, message: str) -> NoReturn:
        """One usage line and the error, exit 2; the full help is one ``--help`` away."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\nSee '{self.prog} --help'.\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The commands listed one per line under "commands:", without argparse's metavar row."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=28)

    def _iter_indented_subactions(
        self, action: argparse.Action
    ) -> Generator[argparse.Action, None, None]:
        # Not indented further: argparse measures the help column before it indents
        # them, so a long name ("export-sales") would wrap its help onto a line of its own.
        if isinstance(action, argparse._SubParsersAction):
            yield from action._get_subactions()

    def _format_action(self, action: argparse.Action) -> str:
        text = super()._format_action(action)
        if isinstance(action, argparse._SubParsersAction):
            return text.split("\n", 1)[1]  # (the first line is "  <command>")
        return text


class _Version(argparse.Action):
    """``--version``: the core and each installed plugin distribution, then exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        from x402srv.cli.versions import version_text

        print(version_text())
        parser.exit(0)


def build_parser() -> Parser:
    parser = Parser(
        prog="x402srv",
        usage="x402srv <command> [options]\n       x402srv --config FILE [serve options]",
        description="Payment-gated access server (x402 v2, A2A agent card, bearer tokens).",
        epilog="Without a command, x402srv serves: x402srv --config seller.toml\n"
        "Run 'x402srv <command> --help' for a command's options (docs/cli.md).",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the version of x402srv and of each installed plugin, and exit",
    )
    commands = parser.add_subparsers(
        dest="command", title="commands", metavar="<command>", prog="x402srv"
    )
    serve = commands.add_parser("serve", help="serve the access endpoint (the default)")
    serve.add_argument("--config", required=True, help="seller TOML file")
    serve.add_argument("--host", help="override [server] host")
    serve.add_argument("--port", type=int, help="override [server] port")
    serve.add_argument("--workers", type=int, help="override [server] workers")
    check = commands.add_parser(
        "check", help="validate a config, print it without secrets, probe its settlers and RPCs"
    )
    check.add_argument("--config", required=True, help="seller TOML file")
    check.add_argument(
        "--strict",
        action="store_true",
        help="an unreachable or mismatched settler or RPC is an error (exit 2 when the config "
        "names the wrong one, 1 when it does not answer), not a warning",
    )
    commands.add_parser("plugins", help="list installed plugins and what each registers")
    migrate = commands.add_parser(
        "migrate",
        help="bring the store's schema up to date (PostgreSQL: before starting a new version)",
    )
    migrate.add_argument("--config", required=True, help="seller TOML file")
    export = commands.add_parser(
        "export", help="write the store's records, claims, tasks, credits and leases as JSON lines"
    )
    export.add_argument("--config", required=True, help="seller TOML file")
    export.add_argument(
        "--output", help="file to write, readable by its owner only (default: standard output)"
    )
    load = commands.add_parser("import", help="load an export into an empty store")
    load.add_argument("--config", required=True, help="seller TOML file")
    load.add_argument("--input", help="file to read (default: standard input)")
    reconcile = commands.add_parser("reconcile", help="run one reconciler pass and print it")
    reconcile.add_argument("--config", required=True, help="seller TOML file")
    reconcile.add_argument(
        "--grace-seconds", type=float, help="override [reconciler] grace_seconds (0 after a crash)"
    )
    _challenges(commands)
    _grants(commands)
    refunds_cli.add_parser(commands)
    _export_sales(commands)
    _audit(commands)
    demo = commands.add_parser("demo", help="buy a plan on a local chain, step by step")
    demo.add_argument("--keep", action="store_true", help="leave the stack running afterwards")
    return parser


def _challenges(commands: Any) -> None:
    challenges = commands.add_parser(
        "challenges", help="list, show or cancel challenges", formatter_class=_HelpFormatter
    )
    actions = challenges.add_subparsers(
        dest="action", title="commands", metavar="<command>", required=True
    )
    listing = actions.add_parser("list", help="challenges, oldest update first")
    listing.add_argument("--config", required=True, help="seller TOML file")
    listing.add_argument("--state", choices=[s.value for s in State], help="only this state")
    listing.add_argument(
        "--limit", type=int, default=100, help="at most this many challenges (default 100)"
    )
    for name, text in (
        (
            "show",
            "one challenge with its history (and its grant's credits and calls, if it sells calls)",
        ),
        ("cancel", "PENDING -> CANCELLED"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("challenge_id", help="the challengeId (a UUID)")
        action.add_argument("--config", required=True, help="seller TOML file")


def _grants(commands: Any) -> None:
    grants = commands.add_parser(
        "grants", help="revoke a delivered grant", formatter_class=_HelpFormatter
    )
    grant_actions = grants.add_subparsers(
        dest="action", title="commands", metavar="<command>", required=True
    )
    revoke = grant_actions.add_parser(
        "revoke", help="refuse its tokens everywhere (idempotent; recorded in its history)"
    )
    revoke.add_argument("challenge_id", help="the challengeId (the tokens' jti)")
    revoke.add_argument("--config", required=True, help="seller TOML file")
    revoke.add_argument("--reason", default="no reason given", help="kept in the history")


def _export_sales(commands: Any) -> None:
    export = commands.add_parser("export-sales", help="one row per settled payment, for accounting")
    export.add_argument("--config", required=True, help="seller TOML file")
    export.add_argument(
        "--from",
        dest="start",
        required=True,
        help="first instant (RFC 3339, a date = UTC midnight, or epoch seconds)",
    )
    export.add_argument("--to", dest="end", help="end of the range, excluded (default: now)")
    export.add_argument("--format", choices=["csv", "jsonl"], default="csv", help="default csv")
    export.add_argument("--output", help="write to this file instead of stdout")


def _audit(commands: Any) -> None:
    audit = commands.add_parser("audit", help="match on-chain transfers to the wallet with records")
    audit.add_argument("--config", required=True, help="seller TOML file")
    audit.add_argument(
        "--from-block",
        action="append",
        required=True,
        metavar="[NETWORK=]N",
        help="first block to scan for transfers: N for every network, or NETWORK=N for one "
        "(repeat it: each chain counts its own blocks)",
    )
    audit.add_argument(
        "--to-block",
        action="append",
        metavar="[NETWORK=]M",
        help="last block to scan, likewise (default: the latest)",
    )
