"""Before a failover asks the next settler: is this authorization already on its way?

A settler that timed out (or answered 5xx, or dropped the connection) may have
broadcast the transfer. Its nonce means a second settler can never move the
money twice, but asking one while the first one's transaction waits in the
mempool costs a reverted transaction's gas, and a history that names the
wrong settler. So the failover looks first (``watch``), reading the chain
until one of these holds or the lease runs out:

    a transaction announced for it (a settler's txHash) settles it  -> Landed
    it is used at the latest block, and the chain shows the tx       -> Landed
    it is used at the latest block, but not for this payment         -> Spent
    an announced transaction is pending, or the pending block shows
    it used (a transaction in the node's pool carries it)            -> wait, read again
    unused at the pending block, no announced transaction pending    -> Clear: ask the next
    (an RPC that serves no pending block: the latest one decides)
    the RPC cannot answer                                            -> Unreadable
    the lease runs out while it is still pending                     -> StillPending

``Landed`` names the transaction's sender as the chain reports it
(``eth_getTransactionByHash``): the failover credits the settler that sends
from that address, not the one it asked last. What no read can see (a
facilitator that still holds the payment and broadcasts only later) can
still cost one reverted transaction, never a second transfer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from x402srv.interfaces import SettlementRequest
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.verdicts import NotTransferred, Transferred, resolve_authorization

__all__ = ["Clear", "InFlight", "Landed", "Spent", "StillPending", "Unreadable", "watch"]

log = logging.getLogger("x402srv.settlement.failover")

#: First pause between reads while a transaction is pending; doubled up to ``MAX_POLL``.
FIRST_POLL = 0.05
MAX_POLL = 1.0


@dataclass(frozen=True, slots=True)
class Clear:
    """Nothing carries this authorization: the next settler may have it."""


@dataclass(frozen=True, slots=True)
class Landed:
    """``tx_hash`` moved the money; ``sender`` sent it (None when the RPC would not say)."""

    tx_hash: str
    sender: str | None


@dataclass(frozen=True, slots=True)
class Spent:
    """The authorization is used, but the chain shows no transfer of it to the seller."""

    why: str


@dataclass(frozen=True, slots=True)
class StillPending:
    """A transaction carrying it was still waiting to be mined when the time ran out."""

    why: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    why: str


InFlight = Clear | Landed | Spent | StillPending | Unreadable


async def sender_of(chain: ChainReader, tx_hash: str) -> str | None:
    """Who sent ``tx_hash`` (lowercase), or None when the node cannot say now."""
    try:
        found = await chain.transaction(tx_hash)
    except ChainUnavailable:
        return None
    return found.sender if found is not None else None


async def watch(
    chain: ChainReader,
    request: SettlementRequest,
    announced: Iterable[str],
    *,
    deadline: float,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_pending: Callable[[str], Awaitable[None]] | None = None,
) -> InFlight:
    """Read the chain until the authorization is clear, landed or spent, or ``deadline``.

    ``on_pending`` hears once, with the reason, that something is in flight and
    the reads go on (the failover writes it into the record's history).
    """
    hashes = list(dict.fromkeys(h.lower() for h in announced))
    delay = FIRST_POLL
    told = False
    try:
        while True:
            seen = await _look(chain, request, hashes)
            if not isinstance(seen, StillPending):
                return seen
            left = deadline - monotonic()
            if left <= 0:
                return seen
            if not told and on_pending is not None:
                told = True
                await on_pending(seen.why)
            await sleep(min(delay, left))
            delay = min(delay * 2, MAX_POLL)
    except ChainUnavailable as exc:
        return Unreadable(str(exc))


async def _look(chain: ChainReader, request: SettlementRequest, hashes: list[str]) -> InFlight:
    """One round of reads: what the chain shows of the authorization now."""
    auth = request.authorization
    asset, pay_to = request.network.asset, auth.to
    pending_tx = None
    for tx_hash in hashes:
        receipt = await chain.receipt(tx_hash)
        if receipt is not None:
            if receipt.settles(asset, auth.payer, pay_to, auth.value, auth.nonce):
                return Landed(receipt.tx_hash, await sender_of(chain, receipt.tx_hash))
            continue  # mined without it (reverted): the authorization state decides
        if await chain.transaction(tx_hash) is not None:
            pending_tx = tx_hash
    if await chain.authorization_state(asset, auth.payer, auth.nonce):
        verdict = await resolve_authorization(
            chain,
            asset=asset,
            payer=auth.payer,
            pay_to=pay_to,
            value=auth.value,
            nonce=auth.nonce,
            valid_before=auth.valid_before,
        )
        if isinstance(verdict, Transferred):
            return Landed(verdict.tx_hash, await sender_of(chain, verdict.tx_hash))
        if isinstance(verdict, NotTransferred):
            return Spent(verdict.why)
        return StillPending(verdict.why)  # used, its log not visible yet: read again
    if pending_tx is not None:
        return StillPending(f"transaction {pending_tx} is pending")
    try:
        in_pool = await chain.authorization_state(asset, auth.payer, auth.nonce, block="pending")
    except ChainUnavailable as exc:
        # Some hosted RPCs serve no pending block: the latest one (read just above)
        # decides then, as it did before this module; the nonce still holds.
        log.warning("the RPC cannot read its pending block (%s); the latest block decides", exc)
        return Clear()
    if in_pool:
        return StillPending("a pending transaction uses the authorization")
    return Clear()
