"""``transferWithAuthorization``: its call data, its simulation, and what its reverts mean.

Both built-in ways to settle ask the token before anything is broadcast. The
gas-wallet plugin simulates the call it is about to send; the facilitator
settler simulates the same call on x402srv's own RPC (``preflight``) instead of
a ``/verify`` round trip, so an unfunded or already spent authorization is
refused with its reason and no facilitator broadcasts a transfer that reverts.

Revert strings are USDC's (FiatTokenV2), which every EIP-3009 token x402
supports copies; the mapping follows the x402 SDK's facilitator so a buyer sees
the same reason whichever way the seller settles. Whenever the authorization may
already be spent the answer comes from ``verdicts.resolve_authorization``,
never from a revert string alone: a payment that did arrive comes back as
``Settled`` with the transaction that moved it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from eth_utils.crypto import keccak

from x402srv.interfaces import (
    Authorization,
    Rejected,
    Settled,
    SettlementOutcome,
    SettlementRequest,
    Unknown,
)
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.verdicts import NotTransferred, Transferred, resolve_authorization
from x402srv.wire.reasons import Reason

__all__ = [
    "DETAILS",
    "MalformedSignature",
    "Revert",
    "RevertKind",
    "classify_revert",
    "from_chain",
    "judge_revert",
    "preflight",
    "transfer_calldata",
]

log = logging.getLogger("x402srv.transfer")


#: What the buyer reads (``Rejected.detail``) for each refusal the token gives.
DETAILS: dict[str, str] = {
    Reason.INVALID_SIGNATURE: "The authorization's signature does not match its payer.",
    Reason.INSUFFICIENT_BALANCE: "The payer's token balance is too low for this payment.",
    Reason.VALID_BEFORE: "The authorization has expired.",
    Reason.VALID_AFTER: "The authorization is not valid yet.",
    Reason.NONCE_USED: "This authorization was already used or cancelled.",
    Reason.TRANSACTION_FAILED: "The token contract refused the transfer; nothing moved.",
}

#: transferWithAuthorization(from, to, value, validAfter, validBefore, nonce, v, r, s):
#: nine static words, encoded by hand (USDC's original v, r, s overload).
_SELECTOR = keccak(
    text="transferWithAuthorization("
    "address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)"
)[:4]


class MalformedSignature(ValueError):
    """The signature is not 65 bytes of hex: it cannot be split into v, r, s."""


def _address_word(address: str) -> bytes:
    raw = bytes.fromhex(address.removeprefix("0x"))
    if len(raw) != 20:
        raise ValueError("not a 20-byte address")
    return raw.rjust(32, b"\0")


def _uint_word(value: int) -> bytes:
    return value.to_bytes(32, "big")  # OverflowError when negative or too large


def transfer_calldata(auth: Authorization) -> bytes:
    """ABI-encoded call data for the v, r, s overload."""
    try:
        signature = bytes.fromhex(auth.signature.removeprefix("0x"))
        nonce = bytes.fromhex(auth.nonce.removeprefix("0x"))
        words = [
            _address_word(auth.payer),
            _address_word(auth.to),
            _uint_word(auth.value),
            _uint_word(auth.valid_after),
            _uint_word(auth.valid_before),
        ]
    except (ValueError, OverflowError):
        raise MalformedSignature("an address, amount, signature or nonce is malformed") from None
    if len(signature) != 65 or len(nonce) != 32:
        raise MalformedSignature("expected a 65-byte signature and a 32-byte nonce")
    v = signature[64] + 27 if signature[64] in (0, 1) else signature[64]
    words += [nonce, _uint_word(v), signature[:32], signature[32:64]]
    return _SELECTOR + b"".join(words)


class RevertKind(Enum):
    USED = "used"
    """The nonce is spent (by us earlier, by someone else, or cancelled): ask the chain."""
    UNSURE = "unsure"
    """Expired, not yet valid, or a reason we do not know. USDC checks pausing,
    blacklists and the time window before the nonce, so the authorization may be
    spent already: ask the chain before refusing."""
    DEFINITE = "definite"
    """Bad signature or balance: the token found the nonce unused, then refused."""


@dataclass(frozen=True, slots=True)
class Revert:
    kind: RevertKind
    reason: str


def classify_revert(message: str) -> Revert:
    """Map a revert message (``execution reverted: FiatTokenV2: ...``) to an x402 reason."""
    text = message.lower()
    if "authorization is used" in text or "authorizationalreadyused" in text:
        return Revert(RevertKind.USED, Reason.NONCE_USED)
    if "authorization is expired" in text or "authorizationexpired" in text:
        return Revert(RevertKind.UNSURE, Reason.VALID_BEFORE)
    if "authorization is not yet valid" in text or "authorizationnotyetvalid" in text:
        return Revert(RevertKind.UNSURE, Reason.VALID_AFTER)
    if "exceeds balance" in text or "erc20insufficientbalance" in text:
        return Revert(RevertKind.DEFINITE, Reason.INSUFFICIENT_BALANCE)
    if "invalid signature" in text or "signermismatch" in text:
        return Revert(RevertKind.DEFINITE, Reason.INVALID_SIGNATURE)
    return Revert(RevertKind.UNSURE, Reason.TRANSACTION_FAILED)


async def preflight(chain: ChainReader, request: SettlementRequest) -> SettlementOutcome | None:
    """Simulate the transfer at the latest block: None when the token would take it now.

    Otherwise the outcome its revert means (``judge_revert``). Raises
    ``ChainUnavailable`` when the node cannot answer: that is no reason to refuse a
    payment, so the caller decides how else to check it.
    """
    try:
        data = transfer_calldata(request.authorization)
    except MalformedSignature:
        return Rejected(Reason.INVALID_SIGNATURE, DETAILS[Reason.INVALID_SIGNATURE])
    reverted = await chain.simulate(request.network.asset, "0x" + data.hex())
    if reverted is None:
        return None
    return await judge_revert(chain, request, classify_revert(reverted))


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
        return Rejected(Reason.NONCE_USED, DETAILS[Reason.NONCE_USED])
    return Unknown(verdict.why, tx_hint)
