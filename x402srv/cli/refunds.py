"""``x402srv refunds create|list|show`` (docs/refunds.md, docs/cli.md).

``create`` asks for the refund (the store holds its amount against what the
purchase paid) and sends it at once through the network's settlers; what it
cannot finish now, every reconciler pass finishes. Each command shows what
the purchase paid, what its refunds hold, and what is left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from x402srv.cli.operations import opened
from x402srv.config.models import Config, load_config
from x402srv.errors import NotFound, ProblemError
from x402srv.refunds.records import RefundRecord, RefundState
from x402srv.refunds.running import sender_of
from x402srv.refunds.service import money_of, refund_store, request_refund

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    refunds = commands.add_parser("refunds", help="give a purchase's money back (or see refunds)")
    actions = refunds.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="refund a purchase, in full or in part, and send it")
    create.add_argument("purchase_id", help="the purchase's challengeId")
    create.add_argument("--config", required=True, help="seller TOML file")
    create.add_argument(
        "--amount", type=int, help="atomic units (default: everything left to refund)"
    )
    create.add_argument("--reason", required=True, help="why (kept in the refund's history)")
    create.add_argument(
        "--keep-grant", action="store_true", help="a full refund does not revoke the grant"
    )
    create.add_argument("--by", default="operator", help="who asks (default: operator)")
    listing = actions.add_parser("list", help="refunds, oldest first")
    listing.add_argument("--config", required=True, help="seller TOML file")
    listing.add_argument("--purchase", help="only the refunds of this purchase")
    listing.add_argument("--state", choices=[s.value for s in RefundState], help="only this state")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    show = actions.add_parser("show", help="one refund with its history and its purchase's money")
    show.add_argument("refund_id")
    show.add_argument("--config", required=True, help="seller TOML file")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    try:
        if args.action == "create":
            shown = asyncio.run(_create(config, args))
        elif args.action == "show":
            shown = asyncio.run(_show(config, args.refund_id))
        else:
            for line in asyncio.run(_list(config, args)):
                print(line)
            return 0
    except ProblemError as exc:
        print(f"x402srv: {exc.detail}", file=sys.stderr)
        return 1
    print(json.dumps(shown, indent=2))
    return 0


def _money(paid: int, refunded: int, left: int) -> dict[str, str]:
    return {"paid": str(paid), "refunded": str(refunded), "left": str(left)}


async def _create(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    async with opened(config) as pipeline:
        refund = await request_refund(
            pipeline.store,
            config,
            args.purchase_id,
            amount=args.amount,
            reason=args.reason,
            asked_by=args.by,
            revoke_grant=not args.keep_grant,
            clock=pipeline.clock,
        )
        sender = sender_of(pipeline)
        assert sender is not None  # request_refund checked the wallet and the store
        refund = await sender.send(refund)
        money = await money_of(pipeline.store, args.purchase_id)
        return {"refund": refund.to_dict(), **_money(money.paid, money.refunded, money.left)}


async def _show(config: Config, refund_id: str) -> dict[str, Any]:
    async with opened(config) as pipeline:
        refund = await refund_store(pipeline.store).get_refund(refund_id)
        if refund is None:
            raise NotFound(f"no refund {refund_id}")
        money = await money_of(pipeline.store, refund.purchase_id)
        return {"refund": refund.to_dict(), **_money(money.paid, money.refunded, money.left)}


def _line(refund: RefundRecord) -> str:
    tx = f"  {refund.tx_hash}" if refund.tx_hash else ""
    return (
        f"{refund.refund_id}  {refund.state.value:9s}  {refund.amount:>12s}  "
        f"{refund.purchase_id}  {refund.asked_by}: {refund.reason}{tx}"
    )


async def _list(config: Config, args: argparse.Namespace) -> list[str]:
    async with opened(config) as pipeline:
        states = [RefundState(args.state)] if args.state else None
        found = await refund_store(pipeline.store).list_refunds(
            purchase_id=args.purchase, states=states, limit=args.limit
        )
        return [_line(refund) for refund in found]
