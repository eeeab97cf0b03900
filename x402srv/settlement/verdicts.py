"""What the chain says about one authorization (docs/protocol/states.md).

Used wherever an outcome is unknown: a SETTLING record (a buyer's retry, a
reconciler pass), a facilitator that timed out, a gas-wallet transaction that
reverted because the authorization "is used". Never settles anything; only
reads.

"Transferred" is decided on any evidence, at once: a successful transaction
that used THIS authorization (its ``AuthorizationUsed`` for ``(payer, nonce)``)
and moved the value to ``payTo``. A used authorization can never be settled
again, so finishing its challenge is always safe.

"Not transferred" releases a buyer's claim, so it is decided only on
consistent evidence: every read of one decision is pinned to one block (a
load-balanced RPC whose nodes lag each other cannot answer "unused" from one
node and "no receipt" from another), and anything missing (a receipt, a log)
means "not decided yet", never "not transferred".

    the broadcast txHash's receipt settles this authorization   -> Transferred
    at block N (the latest when asked), authorizationState is:
      used, and its AuthorizationUsed tx settles it           -> Transferred
    (its log looked for up to block N; past validBefore, also before it)
      used, and the payer cancelled it                         -> NotTransferred
      used by a transaction whose receipt paid someone else    -> NotTransferred
      used, but a log or receipt is not visible yet            -> Undecided
      unused, and block N is at or past validBefore            -> NotTransferred
      unused, still valid                                      -> Undecided
"""

from __future__ import annotations

from dataclasses import dataclass

from x402srv.settlement.chain import AUTHORIZATION_CANCELED_TOPIC, ChainReader, Log

__all__ = ["NotTransferred", "Transferred", "Undecided", "Verdict", "resolve_authorization"]


@dataclass(frozen=True, slots=True)
class Transferred:
    tx_hash: str


@dataclass(frozen=True, slots=True)
class NotTransferred:
    why: str


@dataclass(frozen=True, slots=True)
class Undecided:
    why: str


Verdict = Transferred | NotTransferred | Undecided


async def resolve_authorization(
    chain: ChainReader,
    *,
    asset: str,
    payer: str,
    pay_to: str,
    value: int,
    nonce: str,
    valid_before: int,
    tx_hint: str | None = None,
) -> Verdict:
    """Decide from the chain whether this authorization paid ``pay_to``.

    Raises ``ChainUnavailable`` when the RPC cannot answer (or cannot answer
    for the pinned block); callers keep the record as it is then.
    """
    if tx_hint:
        receipt = await chain.receipt(tx_hint)
        if receipt is not None and receipt.settles(asset, payer, pay_to, value, nonce):
            return Transferred(receipt.tx_hash)
    block, timestamp = await chain.latest_block()
    if not await chain.authorization_state(asset, payer, nonce, block=block):
        if timestamp >= valid_before:
            return NotTransferred("authorization expired unused")
        return Undecided("authorization not used yet and still valid")
    events = await chain.authorization_events(asset, payer, nonce, to_block=block)
    if not events:
        events = await _events_before(chain, asset, payer, nonce, valid_before, (block, timestamp))
    if any(event.topics[0] == AUTHORIZATION_CANCELED_TOPIC for event in events):
        return NotTransferred("authorization was cancelled by the payer")
    if not events:
        return Undecided("authorization is used but its log is not visible (outside the window?)")
    for event in events:
        receipt = await chain.receipt(event.tx_hash)
        if receipt is None:
            return Undecided("authorization is used but its transaction has no receipt yet")
        if receipt.settles(asset, payer, pay_to, value, nonce):
            return Transferred(receipt.tx_hash)
    return NotTransferred("authorization was spent in a transfer that did not pay us")


async def _events_before(
    chain: ChainReader,
    asset: str,
    payer: str,
    nonce: str,
    valid_before: int,
    latest: tuple[int, int],
) -> list[Log]:
    """The logs of (payer, nonce) in the window that ends at the authorization's ``validBefore``.

    A used authorization was used in a block stamped before its ``validBefore``
    (the token refuses it after), which the window up to the latest block no
    longer reaches once the chain has moved on past it: a seller down for
    longer than ``log_lookback_blocks`` while its facilitator's transfer landed.
    That window ends just before what was searched already. Empty, and nothing
    asked, while ``validBefore`` is still ahead (a log not visible yet is far
    likelier then; once it has passed, this looks) or when the latest window
    reached back to the first block.
    """
    number, timestamp = latest
    searched_from = number - chain.log_lookback_blocks
    if timestamp < valid_before or searched_from <= 0:
        return []
    edge = searched_from - 1  # the newest block the latest window left out
    edge_stamp = await chain.block_timestamp(edge)
    if edge_stamp < valid_before:
        end = edge  # (one read: the usual case, an outage of hours, not days)
    else:
        end = await chain.last_block_before(valid_before, latest=(edge, edge_stamp))
    if end < 0:
        return []
    return await chain.authorization_events(asset, payer, nonce, to_block=end)
