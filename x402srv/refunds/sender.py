"""One refund from REQUESTED to REFUNDED (or FAILED), exactly once on-chain.

Why a crash or a second sender never pays twice: the token refuses a second
use of one ``(wallet, nonce)``, and a refund's nonce is derived from its id;
its ``valid_before`` is fixed by the REQUESTED -> SENDING compare-and-set, so
every send of a refund is the very same authorization. What happened to it
is only ever read from the chain (``verdicts.resolve_authorization``, the
decisions of docs/protocol/states.md):

    REQUESTED         claim it (-> SENDING, valid_before fixed), then as SENDING
    SENDING, chain:   transferred            -> REFUNDED (its txHash)
                      expired unused         -> FAILED (nothing moved; the amount is free again)
                      not used, still valid  -> hand it to the settlers (again), then:
                          Settled            -> REFUNDED
                          Unknown / Rejected -> stays SENDING; the next pass asks the chain

A process killed anywhere in this list leaves a REQUESTED or SENDING refund,
which every reconciler pass (``pass_over``) takes up again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from x402srv.access.failpoints import failpoint
from x402srv.config.models import Config
from x402srv.interfaces import Clock, Rejected, Settled, Settler, Unknown
from x402srv.refunds.records import OPEN_STATES, RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import RefundMoved
from x402srv.refunds.store import RefundStore
from x402srv.refunds.wallet import RefundWallet
from x402srv.server import metrics
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.verdicts import NotTransferred, Transferred, resolve_authorization

__all__ = ["RefundSender"]

log = logging.getLogger("x402srv.refunds.sender")

#: A settler's answer for a refund waits this long at most (a pass must not hang on one).
SETTLE_TIMEOUT_SECONDS = 60.0


class _Hooks:
    """What a settler reports while it sends: the broadcast txHash is kept as the hint."""

    def __init__(self, sender: RefundSender, record: RefundRecord) -> None:
        self._sender = sender
        self.record = record

    async def note_broadcast(self, tx_hash: str) -> None:
        self.record = await self._sender.note(self.record, f"broadcast {tx_hash}", tx_hash)

    async def note(self, reason: str) -> None:
        log.info("refund %s: %s", self.record.refund_id, reason)


class RefundSender:
    """Sends refunds through the network's settlers; the chain decides what happened."""

    def __init__(
        self,
        config: Config,
        store: RefundStore,
        settler: Settler,
        chains: Mapping[str, ChainReader],
        wallets: Mapping[str, RefundWallet],
        *,
        clock: Clock,
        on_refunded: Callable[[RefundRecord], Awaitable[None]] | None = None,
        on_transferred: Callable[[RefundRecord], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.settler = settler
        self.chains = chains
        self.wallets = wallets
        self.clock = clock
        self.on_refunded = on_refunded
        # Runs before SENDING -> REFUNDED, once the chain shows the transfer: a crash after
        # it leaves the refund SENDING, so the next pass runs it again (it must be idempotent).
        self.on_transferred = on_transferred

    async def _move(self, record: RefundRecord, move: RefundMove) -> RefundRecord:
        """The record after ``move``, or as it is now when someone else moved it first.

        The process whose move ends a refund counts it (``x402srv_refunds_total``), once.
        """
        moved = await self.store.move_refund(move)
        if isinstance(moved, RefundMoved):
            if move.to in (RefundState.REFUNDED, RefundState.FAILED):
                who = "operator" if record.asked_by.startswith("operator") else record.asked_by
                metrics.current().refund(who[:40], move.to.value.lower())
            return moved.record
        return moved.record or record

    async def note(self, record: RefundRecord, reason: str, tx_hash: str | None) -> RefundRecord:
        move = RefundMove(
            record.refund_id,
            RefundState.SENDING,
            RefundState.SENDING,
            self.clock(),
            reason,
            tx_hash=tx_hash,
        )
        return await self._move(record, move)

    async def send(self, record: RefundRecord) -> RefundRecord:
        """Take ``record`` as far as it can go now; returns it as it ends up."""
        if record.state is RefundState.REQUESTED:
            wallet = self.wallets.get(record.network)
            if wallet is None:
                log.error("refund %s: no refund wallet on %s", record.refund_id, record.network)
                return record
            now = self.clock()
            claim = RefundMove(
                record.refund_id,
                RefundState.REQUESTED,
                RefundState.SENDING,
                now,
                f"signed by the refund wallet {wallet.address}",
                sender=wallet.address,
                valid_before=int(now) + self.config.refunds.authorization_seconds,
            )
            record = await self._move(record, claim)
            failpoint("refund-after-claim")
        if record.state is not RefundState.SENDING:
            return record
        decided = await self._decide(record)
        if decided is not None:
            return decided
        return await self._hand_over(record)

    async def _decide(self, record: RefundRecord) -> RefundRecord | None:
        """What the chain says: REFUNDED or FAILED when it knows, else None."""
        chain = self.chains.get(record.network)
        if chain is None or record.sender is None or record.valid_before is None:
            return None
        try:
            verdict = await resolve_authorization(
                chain,
                asset=record.asset,
                payer=record.sender,
                pay_to=record.to,
                value=record.value,
                nonce=record.nonce,
                valid_before=record.valid_before,
                tx_hint=record.tx_hash,
            )
        except ChainUnavailable as exc:
            log.warning("refund %s: the chain did not answer (%s)", record.refund_id, exc)
            return record
        if isinstance(verdict, Transferred):
            return await self._refunded(record, verdict.tx_hash, "the chain shows the transfer")
        if isinstance(verdict, NotTransferred):
            failing = RefundMove(
                record.refund_id,
                RefundState.SENDING,
                RefundState.FAILED,
                self.clock(),
                f"nothing moved: {verdict.why}",
                failure=verdict.why,
            )
            return await self._move(record, failing)
        return None

    async def _refunded(self, record: RefundRecord, tx_hash: str, why: str) -> RefundRecord:
        if self.on_transferred is not None:
            await self.on_transferred(record)
        failpoint("refund-transfer-seen")
        done = RefundMove(
            record.refund_id,
            RefundState.SENDING,
            RefundState.REFUNDED,
            self.clock(),
            f"refunded in {tx_hash}: {why}",
            tx_hash=tx_hash,
        )
        after = await self._move(record, done)
        if after.state is RefundState.REFUNDED and self.on_refunded is not None:
            await self.on_refunded(after)
        return after

    async def _hand_over(self, record: RefundRecord) -> RefundRecord:
        wallet = self.wallets.get(record.network)
        option = self.config.option(record.network, record.asset)
        if wallet is None or option is None or wallet.address != record.sender:
            log.error("refund %s: its wallet or token is no longer configured", record.refund_id)
            return record
        request = wallet.authorize(record, option)
        hooks = _Hooks(self, record)
        outcome = await self.settler.settle(request, hooks)
        record = hooks.record
        if isinstance(outcome, Settled):
            failpoint("refund-after-send")
            return await self._refunded(
                record, outcome.tx_hash, f"settled by {outcome.by or 'the network settler'}"
            )
        if isinstance(outcome, Unknown):
            return await self.note(record, f"outcome unknown: {outcome.reason}", outcome.tx_hash)
        assert isinstance(outcome, Rejected)
        return await self.note(record, f"not sent: {outcome.reason}: {outcome.detail}", None)

    async def pass_over(self) -> list[RefundRecord]:
        """Every open refund (REQUESTED, SENDING), oldest first: what a reconciler pass does."""
        finished: list[RefundRecord] = []
        after: tuple[float, str] | None = None
        while True:
            page = await self.store.list_refunds(states=OPEN_STATES, after=after, limit=100)
            for record in page:
                try:
                    finished.append(await self.send(record))
                except ChainUnavailable as exc:
                    log.warning("refund %s: %s", record.refund_id, exc)
            if len(page) < 100:
                return finished
            after = (page[-1].created_at, page[-1].refund_id)
