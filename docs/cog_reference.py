"""Reference pages generated from the code, so they cannot drift from it (run by cog).

``docs/errors.md``, ``docs/cli.md`` and the protocol reference
(``docs/protocol/*.md``) hold ``[[[cog ... ]]]`` blocks that call these
functions; ``./run test`` runs ``cog --check`` (a page that differs from
what the code generates fails the build) and ``cog -r`` rewrites them::

    ./run docs    # (cog -r -I docs on each page listed in COGGED in ./run)

Everything here is deterministic: the order is the code's, the help text is
formatted at a fixed width.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import os
import re
import textwrap
from collections.abc import Iterator

from x402srv import errors, interfaces
from x402srv.cli.parser import build_parser as _parser

__all__ = [
    "a2a_error_codes",
    "a2a_keys",
    "cli_commands",
    "cli_summary",
    "config_errors",
    "docstring_block",
    "docstring_steps",
    "error_table",
    "plugins_listing",
    "protocol_source",
    "reasons",
    "states",
    "transitions",
    "wire_limits",
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


# ------------------------------------------------------------ the protocol reference


def _module_doc(module: str) -> str:
    doc = importlib.import_module(module).__doc__
    if not doc:
        raise ValueError(f"{module} has no docstring: the protocol reference quotes it")
    return inspect.cleandoc(doc)


def docstring_block(module: str, index: int = 0) -> str:
    """The ``index``-th indented block of a module's docstring (its table), as text.

    The tables of the state machine, of recovery from the chain and of the A2A
    mapping live in their modules' docstrings, beside the code they describe;
    the reference quotes them rather than copying them.
    """
    blocks: list[list[str]] = []
    current: list[str] = []
    for line in _module_doc(module).splitlines():
        if line.startswith("    ") or (current and not line.strip()):
            current.append(line)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    if index >= len(blocks):
        raise ValueError(f"{module}'s docstring has no indented block {index}")
    text = textwrap.dedent("\n".join(blocks[index])).strip("\n")
    return "```text\n" + text + "\n```\n"


def docstring_steps(module: str) -> str:
    """A module docstring's numbered list (the access flow's steps), from its first step on."""
    lines = _module_doc(module).splitlines()
    first = next((n for n, line in enumerate(lines) if re.match(r" ?0\. ", line)), None)
    if first is None:
        raise ValueError(f"{module}'s docstring has no numbered steps from 0")
    return "```text\n" + "\n".join(lines[first:]).rstrip() + "\n```\n"


def states() -> str:
    """The states a challenge record can be in, in the code's order, terminal ones marked."""
    from x402srv.access.records import ALLOWED_TRANSITIONS, State

    leaving = {start for start, end in ALLOWED_TRANSITIONS if start is not end}
    rows = ["| state | moves on to |", "|---|---|"]
    for state in State:
        onward = sorted(
            {end.value for start, end in ALLOWED_TRANSITIONS if start is state and end is not state}
        )
        rows.append(
            f"| `{state.value}` | "
            + (", ".join(f"`{name}`" for name in onward) if state in leaving else "(final)")
            + " |"
        )
    return "\n".join(rows) + "\n"


#: Who makes each move the code allows, and what else the same compare-and-set does.
#: Keyed by (from, to); ``transitions()`` refuses a key the code does not allow and a
#: move the code allows that is not described here, so this table cannot drift.
_MOVES: dict[tuple[str, str], tuple[str, str]] = {
    ("PENDING", "SETTLING"): (
        "`moves.settle`",
        "A request whose payment passed the check against the stored offer (flow steps 5-7). "
        "The same compare-and-set claims the payment key `(chainId, asset, from, nonce)` and "
        "stores the authorization, before anything leaves the server. A discovery-first "
        "purchase is created directly in SETTLING, with the same claim. Or `moves.retake`: "
        "whoever reads on the chain that [a payment given back](#a-payment-given-back) was "
        "transferred (the buyer's request, the reconciler, a cancellation); on the "
        "payment's attempt as read.",
    ),
    ("PENDING", "EXPIRED"): (
        "`moves.expire`",
        "The request that finds the challenge past `expiresAt`, or the reconciler. One "
        "holding [a payment given back](#a-payment-given-back) only once the chain shows "
        "it can no longer move, on the payment's attempt as read; the payment goes.",
    ),
    ("PENDING", "CANCELLED"): (
        "`moves.cancel`",
        "`x402srv challenges cancel`, the console or the admin API. A later payment gets "
        "410. One holding [a payment given back](#a-payment-given-back) as for expiry.",
    ),
    ("SETTLING", "SETTLING"): (
        "`moves.note`",
        "Only the attempt that holds the record (its `attempt_id`): marking the payment "
        "submitted right before a settler gets it, the broadcast txHash, a failover's next "
        "settler, the lease ended on an unknown outcome.",
    ),
    ("SETTLING", "PENDING"): (
        "`moves.release`",
        "The attempt whose settler refused the payment (nothing moved on-chain), or whoever "
        "[the chain convinces](#settling-is-decided-by-the-chain). The payment's claim stays "
        "with the challenge (a settler saw it): no other purchase takes it, and this one only "
        "from its buyer ([Proof](proof.md)); the buyer may also pay with a new authorization. "
        "A payment a settler was handed stays on the record too, "
        "[watched](#a-payment-given-back).",
    ),
    ("SETTLING", "PAID"): (
        "`moves.paid`",
        "The attempt whose transaction the chain confirms, or whoever reads the transfer on "
        "the chain (a retry, the reconciler). Claims the txHash; the payer is the signer of "
        "the checked authorization.",
    ),
    ("PAID", "PAID"): (
        "`moves.note`",
        "The delivery claim: one request at a time calls an issuer with side effects, under "
        "a short lease it renews.",
    ),
    ("PAID", "DELIVERED"): (
        "`moves.deliver`",
        "Delivery (a request or the reconciler): the grant is stored; calls are credited "
        "first, keyed by the challenge.",
    ),
    ("PAID", "OWED"): (
        "`moves.owe`, `moves.give_up`",
        "Delivery of a top-up whose grant was revoked or expired meanwhile: nothing is "
        "credited, the payment is owed back. Or the reconciler, for a purchase whose "
        "credential was not issued within `[refunds] auto_undelivered_after_seconds`: a "
        "compare-and-set on the delivery attempt it read, so a delivery made meanwhile wins.",
    ),
    ("DELIVERED", "DELIVERED"): (
        "revocation",
        "The seller revokes the grant (`x402srv challenges revoke`, the console, the admin "
        "API): `revoked_at` is set and the grant stays, answered 410 from then on.",
    ),
}


def transitions() -> str:
    """from | to | move | who makes it: one row per move ``ALLOWED_TRANSITIONS`` permits."""
    from x402srv.access import moves
    from x402srv.access.records import ALLOWED_TRANSITIONS, State

    allowed = {(start.value, end.value) for start, end in ALLOWED_TRANSITIONS}
    if allowed != set(_MOVES):
        raise ValueError(
            "docs/cog_reference.py _MOVES and ALLOWED_TRANSITIONS differ: "
            f"undescribed {sorted(allowed - set(_MOVES))}, gone {sorted(set(_MOVES) - allowed)}"
        )
    order = {state.value: n for n, state in enumerate(State)}
    rows = [
        "| from | to | move | who makes it, and what the same write does |",
        "|---|---|---|---|",
    ]
    for start, end in sorted(allowed, key=lambda move: (order[move[0]], order[move[1]])):
        move, text = _MOVES[(start, end)]
        for each in move.split(", "):
            name = each.strip("`").removeprefix("moves.")
            if each.startswith("`moves.") and not callable(getattr(moves, name, None)):
                raise ValueError(f"x402srv.access.moves has no {name}: update _MOVES")
        rows.append(f"| `{start}` | `{end}` | {move} | {text} |")
    return "\n".join(rows) + "\n"


def wire_limits() -> str:
    """The sizes and shapes the wire codecs refuse beyond, from their constants."""
    from x402srv.wire import protocol

    rows = [
        "| what | limit | past it |",
        "|---|---|---|",
        f"| `POST /x402/access` body | {protocol.MAX_BODY_BYTES} bytes | 400 `INVALID_REQUEST` |",
        f"| `PAYMENT-SIGNATURE` | {protocol.MAX_HEADER_CHARS} characters | 400 `INVALID_REQUEST` |",
        f"| JSON arrays and objects in one document | {protocol.MAX_JSON_CONTAINERS} | "
        "400 `INVALID_REQUEST` |",
        "| `planId` (body, `accepted.extra`) | `[A-Za-z0-9._-]{1,64}` | 400 `INVALID_REQUEST` |",
        "| `resourceId` | `[A-Za-z0-9._:/-]{1,256}` (default `default`) | 400 `INVALID_REQUEST` |",
        "| `requestId`, `topUp` (body) | a UUID, any spelling; kept lowercase canonical | "
        "400 `INVALID_REQUEST` |",
        "| `accepted.extra.challengeId`, `accepted.extra.requestId` | a lowercase canonical "
        "UUID | 400 `INVALID_REQUEST` |",
    ]
    return "\n".join(rows) + "\n"


def a2a_keys() -> str:
    """The a2a-x402 metadata keys and payment statuses x402srv reads and writes."""
    from x402srv.a2a import extension

    keys = ("STATUS_KEY", "REQUIRED_KEY", "PAYLOAD_KEY", "RECEIPTS_KEY", "ERROR_KEY")
    lines = ["metadata keys: " + ", ".join(f"`{getattr(extension, k)}`" for k in keys)]
    lines.append("payment statuses: " + ", ".join(f"`{s.value}`" for s in extension.PaymentStatus))
    lines.append(
        "activated by: "
        + " or ".join(f"`{h}`" for h in extension.EXTENSION_HEADERS)
        + f" naming `{extension.X402_EXTENSION_URI}`"
    )
    return "\n\n".join(lines) + "\n"


def a2a_error_codes() -> str:
    """x402 reason -> ``x402.payment.error``: the extension's code for each reason string."""
    from x402srv.a2a import extension

    by_code: dict[str, list[str]] = {}
    for reason, code in extension.REASON_CODES.items():
        by_code.setdefault(code.value, []).append(str(reason))
    rows = ["| `x402.payment.error` | x402 reasons |", "|---|---|"]
    by_code.setdefault(extension.ExtensionError.SETTLEMENT_FAILED.value, [])
    for error, found in by_code.items():
        named = ", ".join(f"`{r}`" for r in found)
        if error == extension.ExtensionError.SETTLEMENT_FAILED:
            named += (", " if named else "") + "and every reason not named in this table"
        rows.append(f"| `{error}` | {named} |")
    return "\n".join(rows) + "\n"
