"""The ``x402srv`` command (``docs/cli.md``).

    x402srv --config FILE [--host H] [--port P] [--workers N]   serve (the main job)
    x402srv check --config FILE [--strict]                       validate, print resolved config,
                                                                 probe the settlers and RPCs
    x402srv plugins                                              list plugins and what they register
    x402srv migrate --config FILE                                bring the store's schema up to date
    x402srv export --config FILE [--output F]                    the store as JSON lines
    x402srv import --config FILE [--input F]                     load an export into an empty store
    x402srv reconcile --config FILE [--grace-seconds S]          one reconciler pass, print changes
    x402srv challenges list|show ID|cancel ID --config FILE      inspect and cancel challenges
    x402srv grants revoke ID --config FILE [--reason R]          revoke a delivered grant
    x402srv refunds create|list|show --config FILE               give a purchase's money back
    x402srv export-sales --config FILE --from T [--to T] [--format csv|jsonl]   sales rows
    x402srv audit --config FILE --from-block [NET=]N [--to-block [NET=]M]  transfers vs records
    x402srv demo [--keep]                                        buy a plan on a local chain

Exit codes: 0 ok, 2 bad usage or config, 1 anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from x402srv.access.records import State
from x402srv.cli import operations
from x402srv.cli import refunds as refunds_cli
from x402srv.cli.audit import AuditReport, audit_networks
from x402srv.config.models import Config, load_config
from x402srv.errors import ConfigError, ProblemError, StoreUnavailable
from x402srv.server.logs import configure_logging
from x402srv.server.registry import Registry
from x402srv.stores.dump import write_atomically
from x402srv.wire.offers import rfc3339

__all__ = ["main"]

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

#: ``sys.setswitchinterval`` of a serving process (Python's default is 0.005).
SWITCH_INTERVAL_SECONDS = 0.001


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="x402srv",
        description="Payment-gated access server (x402 v2, A2A agent card, bearer tokens).",
        epilog="Without a command, x402srv serves: x402srv --config seller.toml",
    )
    commands = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    serve = commands.add_parser("serve", help="serve the access endpoint (default)")
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
    commands.add_parser("plugins", help="list installed plugins")
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
    challenges = commands.add_parser("challenges", help="list, show or cancel challenges")
    actions = challenges.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="challenges, oldest update first")
    listing.add_argument("--config", required=True, help="seller TOML file")
    listing.add_argument("--state", choices=[s.value for s in State], help="only this state")
    listing.add_argument(
        "--limit", type=int, default=100, help="at most this many challenges (default 100)"
    )
    for name, text in (
        ("show", "one challenge with its history (and its grant's calls, if it sells them)"),
        ("cancel", "PENDING -> CANCELLED"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("challenge_id", help="the challengeId (a UUID)")
        action.add_argument("--config", required=True, help="seller TOML file")
    grants = commands.add_parser("grants", help="revoke a delivered grant")
    grant_actions = grants.add_subparsers(dest="action", required=True)
    revoke = grant_actions.add_parser(
        "revoke", help="refuse its tokens everywhere (idempotent; recorded in its history)"
    )
    revoke.add_argument("challenge_id", help="the challengeId (the tokens' jti)")
    revoke.add_argument("--config", required=True, help="seller TOML file")
    revoke.add_argument("--reason", default="no reason given", help="kept in the history")
    refunds_cli.add_parser(commands)
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
    demo = commands.add_parser("demo", help="buy a plan on a local chain, step by step")
    demo.add_argument("--keep", action="store_true", help="leave the stack running afterwards")
    return parser


def _serve(args: argparse.Namespace) -> int:
    from x402srv.server.serve import serve

    return serve(args.config, {"host": args.host, "port": args.port, "workers": args.workers})


def _check(args: argparse.Namespace) -> int:
    """Validate offline, print, then probe the settlers and RPCs (``x402srv.server.probes``).

    Without ``--strict`` a probe's finding is a warning: the config is valid, and
    what did not answer may answer by the time the server starts. With it, exit 2
    when a finding is the config naming the wrong thing (as serving would), else 1.
    """
    from x402srv.refunds.wallet import WalletBalance, balances, wallets
    from x402srv.server.probes import Finding, probe

    config = load_config(args.config)
    built = Registry().build(config)
    described = config.describe()
    refund_wallets = wallets(config)
    if refund_wallets:
        described["resolved"]["refund_wallets"] = {n: w.address for n, w in refund_wallets.items()}
    print(json.dumps(described, indent=2))

    async def probed() -> tuple[list[WalletBalance], list[Finding]]:
        # One event loop: the chain readers' client belongs to it (probe closes them).
        held = await balances(config, built.chains, refund_wallets)
        return held, await probe(config, built)

    held, findings = asyncio.run(probed())
    for each in held:
        shown = "unknown (the RPC did not answer)" if each.balance is None else each.balance
        print(f"refund wallet {each.address} on {each.network}: {shown}", file=sys.stderr)
    for finding in findings:
        print(f"{'error' if args.strict else 'warning'}: {finding.text}", file=sys.stderr)
    for each in held:
        if each.low:
            print(
                f"warning: refund wallet {each.address} on {each.network} holds less than "
                f"refunds.low_balance ({config.refunds.low_balance}) of {each.asset}",
                file=sys.stderr,
            )
    if args.strict and findings:
        print(f"x402srv: {len(findings)} probe(s) failed", file=sys.stderr)
        return 2 if any(finding.config for finding in findings) else 1
    warned = f" ({len(findings)} warning(s): see above)" if findings else ""
    print(f"config OK{warned}", file=sys.stderr)
    return 0


def _plugins(args: argparse.Namespace) -> int:

    for row in Registry().describe():
        kinds = "; ".join(
            f"{kind}: {', '.join(names)}" for kind, names in row.items() if isinstance(names, list)
        )
        print(f"{row['plugin']} ({row['distribution']})  {kinds}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    steps = asyncio.run(operations.migrate(config))
    if steps is None:
        print(f"the {config.store.backend} store keeps its own schema: nothing to migrate")
        return 0
    for step in steps:
        print(step)
    print("schema up to date" + ("" if steps else " (nothing applied)"), file=sys.stderr)
    return 0


def _export(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        if args.output:
            with write_atomically(Path(args.output)) as out:
                counts = asyncio.run(operations.export_records(config, out))
        else:
            counts = asyncio.run(operations.export_records(config, sys.stdout))
    except OSError as exc:
        print(f"x402srv: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    except ValueError as exc:  # DumpError: a store that cannot export
        print(f"x402srv: export refused: {exc}", file=sys.stderr)
        return 1
    print(f"exported {counts}", file=sys.stderr)
    return 0


def _import(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        if args.input:
            with open(args.input, encoding="utf-8") as lines:
                counts = asyncio.run(operations.import_records(config, lines))
        else:
            counts = asyncio.run(operations.import_records(config, sys.stdin))
    except OSError as exc:
        print(f"x402srv: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 1
    except ValueError as exc:  # DumpError, or the store refused an item
        print(f"x402srv: import refused: {exc}", file=sys.stderr)
        return 1
    print(f"imported {counts}", file=sys.stderr)
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    report = asyncio.run(operations.reconcile(config, grace_seconds=args.grace_seconds))
    if report is None:
        print("x402srv: another reconciler holds the lease; try again", file=sys.stderr)
        return 1
    for change in report.changes:
        print(change)
    for challenge_id in report.unresolved:
        print(f"{challenge_id}  unresolved (the chain has not decided yet, or the issuer failed)")
    print(
        f"reconciled: {len(report.changes)} changed, {len(report.unresolved)} unresolved, "
        f"{report.pruned} pruned",
        file=sys.stderr,
    )
    return 0


def _challenges(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.action == "list":
        state = State(args.state) if args.state else None
        records = asyncio.run(operations.list_records(config, state=state, limit=args.limit))
        for record in records:
            owed = "  owed to the buyer" if record.state is State.OWED else ""
            print(
                f"{record.challenge_id}  {record.state.value:9s}  {record.plan_id:12s}  "
                f"{record.request_id}  updated {rfc3339(record.updated_at)}{owed}"
            )
        return 0
    try:
        if args.action == "show":
            shown = asyncio.run(operations.show(config, args.challenge_id))
        else:
            shown = operations.redacted(asyncio.run(operations.cancel(config, args.challenge_id)))
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 1
    print(json.dumps(shown, indent=2))
    return 0


def _grants(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        record, revoked_now = asyncio.run(operations.revoke(config, args.challenge_id, args.reason))
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 1
    print(json.dumps(operations.redacted(record), indent=2))
    print("revoked" if revoked_now else "already revoked", file=sys.stderr)
    return 0


def _export_sales(args: argparse.Namespace) -> int:
    import time

    from x402srv.usage.figures import parse_time
    from x402srv.usage.sales import render

    config = load_config(args.config)
    try:
        start = parse_time(args.start, "--from")
        end = parse_time(args.end, "--to") if args.end else time.time()
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 2
    rows = asyncio.run(operations.export_sales(config, start, end))
    text = render(rows, args.format)
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    print(f"{len(rows)} settled payment(s)", file=sys.stderr)
    return 0


def _blocks(config: Config, given: list[str] | None, what: str) -> dict[str, int]:
    """``N`` (every network with an RPC) and ``NETWORK=N`` (one), by CAIP-2 id."""
    blocks: dict[str, int] = {}
    networks = {n.caip2: n for n in config.resolved_networks}
    names = {n.name: n.caip2 for n in config.resolved_networks}
    for value in given or ():
        where, _, number = value.rpartition("=")
        try:
            block = int(number)
        except ValueError:
            raise ConfigError(f"{what}: {value!r} is not [NETWORK=]BLOCK") from None
        if not where:
            for caip2, network in networks.items():
                if network.rpc_url:
                    blocks.setdefault(caip2, block)
            continue
        caip2 = names.get(where, where)
        if caip2 not in networks:
            raise ConfigError(f"{what}: {where!r} is not a configured network")
        blocks[caip2] = block
    return blocks


def _audit(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    starts = _blocks(config, args.from_block, "--from-block")
    ends = _blocks(config, args.to_block, "--to-block")
    cursors = {caip2: (start, ends.get(caip2)) for caip2, start in starts.items()}

    async def run() -> list[AuditReport]:
        async with operations.opened(config) as pipeline:
            return await audit_networks(pipeline, cursors)

    reports = asyncio.run(run())
    for report in reports:
        print(f"audit of {report.network} blocks {report.from_block}..{report.to_block}")
        for transfer, challenge_id in report.matched:
            print(f"matched    {transfer.tx_hash}  {transfer.value:>12}  challenge {challenge_id}")
        for transfer, why in report.unmatched:
            print(
                f"UNMATCHED  {transfer.tx_hash}  {transfer.value:>12}  from {transfer.payer}: {why}"
            )
        for challenge_id, tx_hash in report.missing_on_chain:
            print(f"MISSING    {tx_hash}  challenge {challenge_id} claims it; the chain does not")
    skipped = [n.caip2 for n in config.resolved_networks if n.caip2 not in cursors]
    for caip2 in skipped:
        print(f"SKIPPED    {caip2}: no RPC URL, or no --from-block for it")
    print(
        f"{sum(len(r.matched) for r in reports)} matched, "
        f"{sum(len(r.unmatched) for r in reports)} unmatched transfers, "
        f"{sum(len(r.missing_on_chain) for r in reports)} records without their transfer, "
        f"on {len(reports)} network(s)",
        file=sys.stderr,
    )
    return 0 if all(r.clean for r in reports) and not skipped else 1


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0] not in COMMANDS and args_list[0] not in ("-h", "--help")):
        args_list.insert(0, "serve")
    args = _parser().parse_args(args_list)
    configure_logging()
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "plugins":
            return _plugins(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "export":
            return _export(args)
        if args.command == "import":
            return _import(args)
        if args.command == "reconcile":
            return _reconcile(args)
        if args.command == "challenges":
            return _challenges(args)
        if args.command == "grants":
            return _grants(args)
        if args.command == "refunds":
            return refunds_cli.run(args)
        if args.command == "export-sales":
            return _export_sales(args)
        if args.command == "audit":
            return _audit(args)
        if args.command == "demo":
            from x402srv.demo import run_demo  # only this command loads the demo (and the x402 SDK)

            return run_demo(keep=args.keep)
        return _serve(args)
    except ConfigError as exc:
        print(f"x402srv: configuration error: {exc}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:  # a subclass of ProblemError: before the generic case
        print(f"x402srv: the store cannot be reached: {exc.detail}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
