"""From what the chain shows to a settlement outcome.

Three moments ask the chain: the simulation reverted, the receipt arrived, the
receipt did not arrive. Whenever the authorization may already be spent the
answer comes from ``x402srv.resolution.resolve_authorization`` (the core's one
reading of SPEC 5.2), never from a revert string alone: a payment that did
arrive must come back as ``Settled`` with the transaction that moved it.
"""

from __future__ import annotations

import asyncio
import logging

from x402srv.chain import ChainReader, ChainUnavailable, Receipt
from x402srv.interfaces import Rejected, Settled, SettlementOutcome, SettlementRequest, Unknown
from x402srv.resolution import NotTransferred, Transferred, resolve_authorization

from .calldata import DETAILS, REASON_NONCE_USED, REASON_TRANSACTION_FAILED, Revert, RevertKind

__all__ = ["await_receipt", "judge_receipt", "judge_revert"]

log = logging.getLogger("x402srv_gaswallet")


#: The first wait between receipt polls; it doubles up to ``poll_interval_seconds``.
FIRST_POLL_SECONDS = 0.02


async def await_receipt(
    chain: ChainReader, tx_hash: str, *, within: float, poll: float
) -> Receipt | None:
    """Poll until the receipt exists or ``within`` seconds passed (then ``None``).

    The first polls come quickly (``FIRST_POLL_SECONDS``, doubling up to
    ``poll``): a chain that mines at once (anvil, a fast L2) has the receipt a
    moment after the send, and a fixed ``poll`` made such a purchase wait half a
    second for nothing.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = min(poll, FIRST_POLL_SECONDS)
    while True:
        try:
            receipt = await chain.receipt(tx_hash)
        except ChainUnavailable:
            receipt = None  # a blip while polling is not an answer; keep asking
        if receipt is not None:
            return receipt
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, poll)


async def judge_receipt(
    chain: ChainReader, request: SettlementRequest, receipt: Receipt
) -> SettlementOutcome:
    """Our transaction was mined: did it move exactly this payment?"""
    auth = request.authorization
    asset = request.network.asset
    if receipt.has_transfer(asset, auth.payer, auth.to, auth.value):
        log.info("challenge %s: settled in %s", request.challenge_id, receipt.tx_hash)
        return Settled(receipt.tx_hash, auth.payer)
    try:
        spent = await chain.authorization_state(asset, auth.payer, auth.nonce)
    except ChainUnavailable:
        return Unknown("transaction moved nothing; chain unreadable", receipt.tx_hash)
    if receipt.status == 0 and not spent:
        log.warning("challenge %s: %s reverted", request.challenge_id, receipt.tx_hash)
        return Rejected(REASON_TRANSACTION_FAILED, DETAILS[REASON_TRANSACTION_FAILED])
    # Reverted because the nonce was spent first (by an earlier attempt, another
    # settler, the payer), or a success without our Transfer log: only the
    # authorization's own history can tell.
    return await from_chain(chain, request, tx_hint=receipt.tx_hash)


async def judge_revert(
    chain: ChainReader, request: SettlementRequest, revert: Revert
) -> SettlementOutcome:
    """The simulation reverted: refuse, unless the authorization may be spent already."""
    auth = request.authorization
    if revert.kind is RevertKind.UNSURE:
        try:
            spent = await chain.authorization_state(request.network.asset, auth.payer, auth.nonce)
        except ChainUnavailable:
            return Unknown("simulation reverted; authorization state unreadable")
        if spent:
            return await from_chain(chain, request, tx_hint=None)
    if revert.kind is RevertKind.USED:
        return await from_chain(chain, request, tx_hint=None)
    log.info("challenge %s: refused (%s)", request.challenge_id, revert.reason)
    return Rejected(revert.reason, DETAILS[revert.reason])


async def from_chain(
    chain: ChainReader, request: SettlementRequest, *, tx_hint: str | None
) -> SettlementOutcome:
    """What the chain says happened to this authorization, as an outcome."""
    auth = request.authorization
    try:
        verdict = await resolve_authorization(
            chain,
            asset=request.network.asset,
            payer=auth.payer,
            pay_to=auth.to,
            value=auth.value,
            nonce=auth.nonce,
            valid_before=auth.valid_before,
            tx_hint=tx_hint,
        )
    except ChainUnavailable:
        return Unknown("chain unreadable while resolving the authorization", tx_hint)
    if isinstance(verdict, Transferred):
        log.info("challenge %s: paid in %s", request.challenge_id, verdict.tx_hash)
        return Settled(verdict.tx_hash, auth.payer)
    if isinstance(verdict, NotTransferred):
        log.info("challenge %s: not transferred (%s)", request.challenge_id, verdict.why)
        return Rejected(REASON_NONCE_USED, DETAILS[REASON_NONCE_USED])
    return Unknown(verdict.why, tx_hint)
