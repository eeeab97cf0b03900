"""Sign and send one settlement transaction under the nonce gate.

For each try: take the ticket's nonce, sign locally, hand the txHash to
``hooks.note_broadcast`` *before* the bytes leave (a crash right after the send
still leaves the hash in the record), then send. The node's answer decides:

    accepted, or "already known"        -> out
    "nonce too low", "replacement ..."  -> someone holds that nonce: resync, re-sign
    insufficient funds, fee too low ... -> refused: nothing is out
    timeout, dropped connection, HTTP
    error, a node error we do not know  -> maybe out: follow the receipt
    connection refused                  -> nothing left this host

Re-sending the same authorization under a new nonce is safe: EIP-3009 moves
it at most once, a second copy only reverts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from eth_account.signers.local import LocalAccount
from web3.exceptions import Web3RPCError

from x402srv.plugin import Reason, Rejected, SettlementHooks, failpoint

from .nonces import NonceGate, NonceTicket, NonceUnavailable
from .rpc import GasWalletWeb3, never_left, node_message

__all__ = ["Attempt", "Broadcaster"]

log = logging.getLogger("x402srv_gaswallet")

#: The node already holds this very transaction: it is out.
_ALREADY_SENT = ("already known", "already imported", "known transaction")
#: Another transaction holds this nonce (pick a later one), or ours ran ahead.
_NONCE_WRONG = (
    "nonce too low",
    "replacement transaction underpriced",
    "nonce has already",
    "nonce too high",
)
#: The node refused the transaction itself; it went nowhere.
_REFUSED = (
    "insufficient funds",
    "less than block base fee",
    "fee cap less than",
    "intrinsic gas too low",
    "exceeds block gas limit",
)


@dataclass(slots=True)
class Attempt:
    """What one ``settle`` call has put out so far: the last txHash noted, if any."""

    challenge_id: str
    tx_hash: str | None = None


class Broadcaster:
    """One per settler: its gate is the only way to the wallet's nonces."""

    def __init__(self, account: LocalAccount, gate: NonceGate, *, retries: int) -> None:
        self._account = account
        self._gate = gate
        self._retries = retries

    async def send(
        self,
        w3: GasWalletWeb3,
        unsigned: dict[str, Any],
        hooks: SettlementHooks,
        attempt: Attempt,
    ) -> Rejected | None:
        """``None``: the transaction is (or may be) out, its hash in ``attempt``.

        ``Rejected``: the node refused every try or could not be used, so nothing
        of this attempt is out.
        """
        try:
            async with self._gate.hold() as ticket:
                return await self._tries(w3, unsigned, hooks, attempt, ticket)
        except NonceUnavailable as exc:
            log.warning("challenge %s: %s; nothing sent", attempt.challenge_id, exc)
            return _unavailable("The gas wallet is busy or unreachable; nothing was sent.")

    async def _tries(
        self,
        w3: GasWalletWeb3,
        unsigned: dict[str, Any],
        hooks: SettlementHooks,
        attempt: Attempt,
        ticket: NonceTicket,
    ) -> Rejected | None:
        who = attempt.challenge_id
        for _ in range(self._retries + 1):
            signed = self._account.sign_transaction({**unsigned, "nonce": ticket.nonce})
            tx_hash = "0x" + bytes(signed.hash).hex()
            try:
                await hooks.note_broadcast(tx_hash)
            except Exception as exc:
                log.error("challenge %s: txHash not recorded (%s); not sent", who, _kind(exc))
                return _unavailable("The settlement could not be recorded; nothing was sent.")
            attempt.tx_hash = tx_hash
            try:
                await w3.eth.send_raw_transaction(signed.raw_transaction)
            except Web3RPCError as exc:
                message = node_message(exc).lower()
                if any(text in message for text in _ALREADY_SENT):
                    ticket.sent = True
                    return None
                if any(text in message for text in _NONCE_WRONG):
                    if not await self._resync(ticket, who, message):
                        return _unavailable("The gas wallet is unreachable; nothing was sent.")
                    continue
                if any(text in message for text in _REFUSED):
                    log.error("challenge %s: node refused %s: %s", who, tx_hash, message[:120])
                    return _unavailable("The gas wallet could not send; nothing was sent.")
                log.warning("challenge %s: send of %s answered %r", who, tx_hash, message[:120])
                return None  # an answer we do not know: the transaction may be out
            except Exception as exc:
                if never_left(exc):
                    log.warning("challenge %s: node unreachable (%s); not sent", who, _kind(exc))
                    return _unavailable(
                        "The settlement node could not be reached; nothing was sent."
                    )
                log.warning(
                    "challenge %s: send of %s cut (%s); maybe out", who, tx_hash, _kind(exc)
                )
                return None
            ticket.sent = True
            log.info("challenge %s: sent %s (nonce %d)", who, tx_hash, ticket.nonce)
            failpoint("after-broadcast")
            return None
        log.error("challenge %s: nonce kept colliding; nothing sent", who)
        return _unavailable("The gas wallet is busy; nothing was sent. Try again.")

    async def _resync(self, ticket: NonceTicket, who: str, why: str) -> bool:
        taken = ticket.nonce
        try:
            if "too high" in why:
                ticket.nonce = await self._gate.pending_count()
            else:
                await self._gate.resync(ticket)
        except Exception as exc:
            log.warning("challenge %s: nonce unreadable (%s)", who, _kind(exc))
            return False
        log.warning(
            "challenge %s: nonce %d refused (%s); resyncing to %d",
            who,
            taken,
            why[:80],
            ticket.nonce,
        )
        return True


def _kind(exc: BaseException) -> str:
    """Only the type: messages of HTTP errors quote the URL, which may hold a key."""
    return type(exc).__name__


def _unavailable(detail: str) -> Rejected:
    """Nothing was sent because the wallet could not send: another settler may."""
    return Rejected(Reason.UNEXPECTED_SETTLE_ERROR, detail, settler_failed=True)
