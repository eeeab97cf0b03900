"""What the chain says about one authorization (SPEC 5.2).

Used wherever an outcome is unknown: a SETTLING record whose lease ran out, a
facilitator that timed out, a gas-wallet transaction that reverted because the
authorization "is used". Never settles anything; only reads.

    broadcast txHash known and its receipt moved the money   -> Transferred
    authorizationState(from, nonce) is true:
        an AuthorizationUsed tx moved value from -> payTo    -> Transferred
        the nonce was cancelled or spent elsewhere           -> NotTransferred
        no event found in the lookback window                -> Undecided
    not used, and the latest block is past validBefore       -> NotTransferred
    not used, still within validBefore                       -> Undecided
"""

from __future__ import annotations

from dataclasses import dataclass

from .chain import AUTHORIZATION_CANCELED_TOPIC, ChainReader

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

    Raises ``ChainUnavailable`` when the RPC cannot answer; callers keep the
    record as it is then.
    """
    if tx_hint:
        receipt = await chain.receipt(tx_hint)
        if receipt is not None and receipt.has_transfer(asset, payer, pay_to, value):
            return Transferred(receipt.tx_hash)
    if await chain.authorization_state(asset, payer, nonce):
        events = await chain.authorization_events(asset, payer, nonce)
        for event in events:
            if event.topics[0] == AUTHORIZATION_CANCELED_TOPIC:
                return NotTransferred("authorization was cancelled by the payer")
            receipt = await chain.receipt(event.tx_hash)
            if receipt is not None and receipt.has_transfer(asset, payer, pay_to, value):
                return Transferred(receipt.tx_hash)
        if events:
            return NotTransferred("authorization was spent in a transfer that did not pay us")
        return Undecided("authorization is used but its transaction is outside the log window")
    _, timestamp = await chain.latest_block()
    if timestamp >= valid_before:
        return NotTransferred("authorization expired unused")
    return Undecided("authorization not used yet and still valid")
