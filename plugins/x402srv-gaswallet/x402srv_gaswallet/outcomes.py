"""From what the chain shows to a settlement outcome.

Two moments here ask the chain: the receipt arrived, the receipt did not
arrive (a reverted simulation is judged by ``x402srv.settlement.transfer_call``, which the
facilitator settler shares). Whenever the authorization may already be spent the
answer comes from ``x402srv.settlement.transfer_call.from_chain`` (the core's one reading of
the chain, docs/protocol/states.md), never from a revert string alone: a payment that
did arrive must come back as ``Settled`` with the transaction that moved it.
"""

from __future__ import annotations

import asyncio
import logging

from x402srv.plugin import (
    DETAILS,
    ChainReader,
    ChainUnavailable,
    Reason,
    Receipt,
    Rejected,
    Settled,
    SettlementOutcome,
    SettlementRequest,
    Unknown,
    from_chain,
)

__all__ = ["await_receipt", "judge_receipt"]

log = logging.getLogger("x402srv_gaswallet")


#: The first wait between receipt polls; it doubles up to ``poll_interval_seconds``.
#: Anvil mines a moment (under a millisecond to a few) after it accepts a transaction:
#: a first pause of 20 ms cost most purchases that missed the first read 20 ms for
#: nothing, where 5 ms costs a slow chain only two more reads per settlement.
FIRST_POLL_SECONDS = 0.005


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
    if receipt.settles(asset, auth.payer, auth.to, auth.value, auth.nonce):
        log.info("challenge %s: settled in %s", request.challenge_id, receipt.tx_hash)
        return Settled(receipt.tx_hash, auth.payer)
    try:
        spent = await chain.authorization_state(asset, auth.payer, auth.nonce)
    except ChainUnavailable:
        return Unknown("transaction moved nothing; chain unreadable", receipt.tx_hash)
    if receipt.status == 0 and not spent:
        log.warning("challenge %s: %s reverted", request.challenge_id, receipt.tx_hash)
        return Rejected(Reason.TRANSACTION_FAILED, DETAILS[Reason.TRANSACTION_FAILED])
    # Reverted because the nonce was spent first (by an earlier attempt, another
    # settler, the payer), or a success without our Transfer log: only the
    # authorization's own history can tell.
    return await from_chain(chain, request, tx_hint=receipt.tx_hash)
