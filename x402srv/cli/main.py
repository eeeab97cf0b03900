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
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from x402srv.access.records import State
from x402srv.cli import operations
from x402srv.cli import refunds as refunds_cli
from x402srv.cli.audit import AuditReport, Transfer, audit_networks
from x402srv.cli.output import Progress, counted, quiet_broken_pipe
from x402srv.cli.parser import TOP_LEVEL_OPTIONS, build_parser
from x402srv.cli.versions import EXAMPLE_NOTE, plugin_distributions
from x402srv.config.lines import locate
from x402srv.config.models import Config, load_config
from x402srv.errors import ConfigError, ProblemError, StoreUnavailable
from x402srv.server.logs import configure_logging
from x402srv.server.registry import Registry
from x402srv.stores.dump import write_atomically
from x402srv.usage.money import amount_text
from x402srv.wire.offers import rfc3339

__all__ = ["build_parser", "main"]

#: Commands that serve or narrate: their INFO log lines are what they show. The
#: operator commands print what they did themselves, and log warnings only.
_CHATTY = ("serve", "demo")


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
        print(f"x402srv: {counted(len(findings), 'probe')} failed", file=sys.stderr)
        return 2 if any(finding.config for finding in findings) else 1
    warned = f" ({counted(len(findings), 'warning')}: see above)" if findings else ""
    print(f"config OK{warned}", file=sys.stderr)
    return 0


def _plugins(args: argparse.Namespace) -> int:
    examples = {
        plugin for dist in plugin_distributions() if dist.example for plugin in dist.plugins
    }
    for row in Registry().describe():
        kinds = "; ".join(
            f"{kind}: {', '.join(names)}" for kind, names in row.items() if isinstance(names, list)
        )
        note = f"  ({EXAMPLE_NOTE})" if row["plugin"] in examples else ""
        print(f"{row['plugin']} ({row['distribution']})  {kinds}{note}")
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
        with Progress("export", "items") as progress:
            if args.output:
                with write_atomically(Path(args.output)) as out:
                    counts = asyncio.run(
                        operations.export_records(config, out, progress=progress.update)
                    )
            else:
                counts = asyncio.run(
                    operations.export_records(config, sys.stdout, progress=progress.update)
                )
    except BrokenPipeError:
        raise  # (an OSError too: the reader of stdout went away, which is not an error here)
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
        with Progress("import", "items") as progress:
            if args.input:
                with open(args.input, encoding="utf-8") as lines:
                    counts = asyncio.run(
                        operations.import_records(config, lines, progress=progress.update)
                    )
            else:
                counts = asyncio.run(
                    operations.import_records(config, sys.stdin, progress=progress.update)
                )
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
    with Progress("reconcile", "records") as progress:
        report = asyncio.run(
            operations.reconcile(config, grace_seconds=args.grace_seconds, progress=progress.update)
        )
    if report is None:
        print("x402srv: another reconciler holds the lease; try again", file=sys.stderr)
        return 1
    for change in report.changes:
        print(change)
    for challenge_id in report.unresolved:
        print(f"{challenge_id}  unresolved (the chain has not decided yet, or the issuer failed)")
    print(
        f"reconciled: {len(report.changes):,} changed, {len(report.unresolved):,} unresolved, "
        f"{counted(report.pruned, 'record')} and {counted(report.pruned_tasks, 'task')} pruned",
        file=sys.stderr,
    )
    return 0


#: ``challenges list``: (header, width) of each column but the last, as ``docker ps`` lays out.
_LIST_COLUMNS = (
    ("CHALLENGE", 36),
    ("STATE", 9),
    ("PLAN", 12),
    ("AMOUNT", 20),
    ("UPDATED", 20),
)


def _challenges(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.action == "list":
        state = State(args.state) if args.state else None
        records = asyncio.run(operations.list_records(config, state=state, limit=args.limit))
        print("  ".join(f"{name:{width}s}" for name, width in _LIST_COLUMNS) + "  REQUEST")
        for record in records:
            owed = "  owed to the buyer" if record.state is State.OWED else ""
            cells = (
                record.challenge_id,
                record.state.value,
                record.plan_id,
                amount_text(config, record.network, record.asset, record.amount),
                rfc3339(record.updated_at),
            )
            line = "  ".join(
                f"{cell:{w}s}" for cell, (_, w) in zip(cells, _LIST_COLUMNS, strict=True)
            )
            print(f"{line}  {record.request_id}{owed}")
        return 0
    try:
        if args.action == "show":
            shown = asyncio.run(operations.show(config, args.challenge_id))
        else:
            record = asyncio.run(operations.cancel(config, args.challenge_id))
            print(
                f"cancelled {record.challenge_id} ({record.plan_id}): a payment for it is "
                "refused from now on (410 CHALLENGE_EXPIRED)"
            )
            return 0
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 1
    print(json.dumps(shown, indent=2))
    return 0


def _grants(args: argparse.Namespace) -> int:
    """One line, as ``docker rm`` says what it removed: the record is ``challenges show``'s."""
    config = load_config(args.config)
    try:
        record, revoked_now = asyncio.run(operations.revoke(config, args.challenge_id, args.reason))
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 1
    if revoked_now:
        print(
            f"revoked {record.challenge_id} ({record.plan_id}, paid "
            f"{amount_text(config, record.network, record.asset, record.amount)}): its tokens "
            f"are refused from now on; reason: {args.reason}"
        )
    else:
        print(f"{record.challenge_id} was already revoked: nothing changed")
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
    print(counted(len(rows), "settled payment"), file=sys.stderr)
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

        def paid(transfer: Transfer, network: str = report.network) -> str:
            return f"{amount_text(config, network, transfer.asset, transfer.value):>22}"

        for transfer, challenge_id in report.matched:
            print(f"matched    {transfer.tx_hash}  {paid(transfer)}  challenge {challenge_id}")
        for transfer, why in report.unmatched:
            print(f"UNMATCHED  {transfer.tx_hash}  {paid(transfer)}  from {transfer.payer}: {why}")
        for challenge_id, tx_hash in report.missing_on_chain:
            print(f"MISSING    {tx_hash}  challenge {challenge_id} claims it; the chain does not")
    skipped = [n.caip2 for n in config.resolved_networks if n.caip2 not in cursors]
    for caip2 in skipped:
        print(f"SKIPPED    {caip2}: no RPC URL, or no --from-block for it")
    matched = sum(len(r.matched) for r in reports)
    unmatched = sum(len(r.unmatched) for r in reports)
    missing = sum(len(r.missing_on_chain) for r in reports)
    print(
        f"{counted(matched + unmatched, 'transfer')}: {matched:,} matched, {unmatched:,} "
        f"unmatched; {counted(missing, 'record')} without their transfer; "
        f"on {counted(len(reports), 'network')}",
        file=sys.stderr,
    )
    return 0 if all(r.clean for r in reports) and not skipped else 1


def _run(args: argparse.Namespace) -> int:
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


def _located(message: str, config_file: str | None) -> str:
    """A config error with ``seller.toml:LINE:`` before each key path (``config.lines``)."""
    if config_file is None:
        return message
    try:
        source = Path(config_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # (load_config said so already)
        return message
    return locate(message, source, config_file)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run, and map what went wrong to an exit code (docs/cli.md)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        if not args_list:  # as pip and docker do: the help, listing every command
            parser.print_help()
            return 0
        if args_list[0].startswith("-") and args_list[0] not in TOP_LEVEL_OPTIONS:
            args_list.insert(0, "serve")  # x402srv --config seller.toml (docs/cli.md)
        args = parser.parse_args(args_list)
        configure_logging(logging.INFO if args.command in _CHATTY else logging.WARNING)
        return _run(args)
    except ConfigError as exc:
        text = _located(str(exc), getattr(args, "config", None))
        print(
            f"x402srv: configuration error:{'' if text[:1] == chr(10) else ' '}{text}",
            file=sys.stderr,
        )
        return 2
    except StoreUnavailable as exc:  # a subclass of ProblemError: before the generic case
        print(f"x402srv: the store cannot be reached: {exc.detail}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `x402srv ... | head`: the reader has all it wanted
        return quiet_broken_pipe()
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
