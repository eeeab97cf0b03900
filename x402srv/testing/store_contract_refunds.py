"""The store contract on refunds (``x402srv.refunds.store.RefundStore``).

The guarantee the refunds rest on: a purchase is never refunded for more than
it paid, in total, across every refund and every instance that shares the
store; and each refund moves only by compare-and-set, so two instances
sending the same refund cannot both move it. A store without the methods
skips these tests (and cannot be used with ``[refunds]``).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from x402srv.interfaces import Store
from x402srv.refunds.records import RefundMove, RefundRecord, RefundState
from x402srv.refunds.rules import OverRefund, RefundCreated, RefundMismatch, RefundMoved
from x402srv.refunds.store import RefundStore, keeps_refunds
from x402srv.testing.builders import BASE_TIME
from x402srv.testing.store_contract_base import RACERS, WORDED, Reopen, StoreContractBase

__all__ = ["RefundContract", "make_refund"]

BUYER = "0x" + "b" * 40
ASSET = "0x" + "a" * 40


def make_refund(
    purchase_id: str = "", amount: int = 100, *, at: float = BASE_TIME, refund_id: str = ""
) -> RefundRecord:
    return RefundRecord.new(
        refund_id=refund_id or f"rf_{uuid.uuid4().hex}",
        purchase_id=purchase_id or f"ch_{uuid.uuid4().hex}",
        network="eip155:31337",
        asset=ASSET,
        to=BUYER,
        amount=amount,
        reason="customer service",
        asked_by="operator",
        now=at,
    )


def _refunds(store: Store) -> RefundStore:
    if not keeps_refunds(store):
        pytest.skip(f"the store {store.name!r} keeps no refunds (not a RefundStore)")
    assert isinstance(store, RefundStore)
    return store


def _sending(refund: RefundRecord, at: float = BASE_TIME + 10) -> RefundMove:
    return RefundMove(
        refund.refund_id,
        RefundState.REQUESTED,
        RefundState.SENDING,
        at,
        "signed by the refund wallet",
        sender="0x" + "5" * 40,
        valid_before=int(at) + 600,
    )


async def _made(store: RefundStore, refund: RefundRecord, paid: int) -> RefundRecord:
    result = await store.create_refund(refund, paid=paid)
    assert isinstance(result, RefundCreated), result
    assert result.created, result
    return result.record


class RefundContract(StoreContractBase):
    """Part of ``StoreContract``: refunds, their claim on what was paid, their moves."""

    async def test_a_refund_is_created_once_and_read_back(self, store: Store) -> None:
        refunds = _refunds(store)
        refund = await _made(refunds, make_refund(amount=40), paid=100)
        assert await refunds.get_refund(refund.refund_id) == refund
        again = await refunds.create_refund(
            make_refund(refund.purchase_id, 1, refund_id=refund.refund_id), paid=100
        )
        assert again == RefundCreated(refund, created=False)
        assert await refunds.get_refund("rf_absent") is None

    async def test_never_more_than_was_paid(self, store: Store) -> None:
        refunds = _refunds(store)
        first = await _made(refunds, make_refund(amount=60), paid=100)
        over = await refunds.create_refund(make_refund(first.purchase_id, 41), paid=100)
        assert over == OverRefund(first.purchase_id, 40)
        last = await _made(refunds, make_refund(first.purchase_id, 40, at=BASE_TIME + 1), paid=100)
        assert await refunds.create_refund(make_refund(first.purchase_id, 1), paid=100) == (
            OverRefund(first.purchase_id, 0)
        )
        assert await refunds.list_refunds(purchase_id=first.purchase_id) == [first, last]

    async def test_amounts_past_64_bits_are_exact(self, store: Store) -> None:
        refunds = _refunds(store)
        paid = 10**30 + 1  # an 18-decimals token: no float, no 64-bit integer holds it
        first = await _made(refunds, make_refund(amount=10**30), paid=paid)
        assert await refunds.create_refund(make_refund(first.purchase_id, 2), paid=paid) == (
            OverRefund(first.purchase_id, 1)
        )
        await _made(refunds, make_refund(first.purchase_id, 1), paid=paid)

    async def test_a_failed_refund_gives_its_amount_back(self, store: Store) -> None:
        refunds = _refunds(store)
        refund = await _made(refunds, make_refund(amount=100), paid=100)
        moved = await refunds.move_refund(_sending(refund))
        assert isinstance(moved, RefundMoved)
        failing = RefundMove(
            refund.refund_id,
            RefundState.SENDING,
            RefundState.FAILED,
            BASE_TIME + 700,
            "authorization expired unused",
            failure="expired",
        )
        failed = await refunds.move_refund(failing)
        assert isinstance(failed, RefundMoved)
        assert failed.record.failure == "expired"
        await _made(refunds, make_refund(refund.purchase_id, 100), paid=100)

    async def test_concurrent_refunds_never_pass_what_was_paid(
        self, sharing: tuple[Store, Store]
    ) -> None:
        one, two = (_refunds(s) for s in sharing)
        purchase = f"ch_{uuid.uuid4().hex}"
        asks = [
            (one if n % 2 else two).create_refund(make_refund(purchase, 30), paid=100)
            for n in range(RACERS)
        ]
        results = await asyncio.gather(*asks)
        made = [r for r in results if isinstance(r, RefundCreated)]
        assert len(made) == 3  # 3 x 30 <= 100 < 4 x 30
        assert all(isinstance(r, OverRefund) for r in results if r not in made)
        assert len(await one.list_refunds(purchase_id=purchase)) == 3

    async def test_a_move_applies_once(self, sharing: tuple[Store, Store]) -> None:
        one, two = (_refunds(s) for s in sharing)
        refund = await _made(one, make_refund(), paid=100)
        results = await asyncio.gather(*(s.move_refund(_sending(refund)) for s in (one, two) * 5))
        moved = [r for r in results if isinstance(r, RefundMoved)]
        assert len(moved) == 1
        record = moved[0].record
        assert record.state is RefundState.SENDING
        assert record.valid_before == BASE_TIME + 610
        assert [s.state for s in record.history] == [RefundState.REQUESTED, RefundState.SENDING]
        assert all(r == RefundMismatch(record) for r in results if r not in moved)
        assert await two.get_refund(refund.refund_id) == record

    async def test_sending_keeps_its_authorization_and_ends_refunded(self, store: Store) -> None:
        refunds = _refunds(store)
        refund = await _made(refunds, make_refund(), paid=100)
        sent = await refunds.move_refund(_sending(refund))
        assert isinstance(sent, RefundMoved)
        note = RefundMove(
            refund.refund_id,
            RefundState.SENDING,
            RefundState.SENDING,
            BASE_TIME + 20,
            "sent again",
            valid_before=1,
            sender="0x" + "6" * 40,
        )
        noted = await refunds.move_refund(note)
        assert isinstance(noted, RefundMoved)
        assert noted.record.valid_before == sent.record.valid_before
        assert noted.record.sender == sent.record.sender
        done = RefundMove(
            refund.refund_id,
            RefundState.SENDING,
            RefundState.REFUNDED,
            BASE_TIME + 30,
            "on-chain",
            tx_hash="0x" + "AB" * 32,
        )
        finished = await refunds.move_refund(done)
        assert isinstance(finished, RefundMoved)
        assert finished.record.tx_hash == "0x" + "ab" * 32
        assert await refunds.get_refund(refund.refund_id) == finished.record

    async def test_moves_the_machine_refuses_raise(self, store: Store) -> None:
        refunds = _refunds(store)
        refund = await _made(refunds, make_refund(), paid=100)
        skip = RefundMove(refund.refund_id, RefundState.REQUESTED, RefundState.REFUNDED, 1.0, "x")
        with pytest.raises(ValueError, match=WORDED):
            await refunds.move_refund(skip)
        assert await refunds.get_refund(refund.refund_id) == refund
        absent = RefundMove("rf_absent", RefundState.REQUESTED, RefundState.SENDING, 1.0, "x")
        assert await refunds.move_refund(absent) == RefundMismatch(None)

    async def test_listing_filters_and_pages(self, store: Store) -> None:
        refunds = _refunds(store)
        made = [await _made(refunds, make_refund(at=BASE_TIME + n), paid=100) for n in range(5)]
        moved = await refunds.move_refund(_sending(made[1]))
        assert isinstance(moved, RefundMoved)
        assert await refunds.list_refunds() == [made[0], moved.record, *made[2:]]
        assert await refunds.list_refunds(states=[RefundState.SENDING]) == [moved.record]
        waiting = await refunds.list_refunds(states=[RefundState.REQUESTED], limit=2)
        assert waiting == [made[0], made[2]]
        rest = await refunds.list_refunds(
            states=[RefundState.REQUESTED], after=(made[2].created_at, made[2].refund_id)
        )
        assert rest == made[3:]

    async def test_refunds_survive_a_reopen(self, store: Store, reopen: Reopen) -> None:
        refund = await _made(_refunds(store), make_refund(amount=70), paid=100)
        again = _refunds(await reopen())
        assert await again.get_refund(refund.refund_id) == refund
        assert await again.create_refund(make_refund(refund.purchase_id, 31), paid=100) == (
            OverRefund(refund.purchase_id, 30)
        )

    async def test_import_writes_refunds_as_exported(self, store: Store) -> None:
        refunds = _refunds(store)
        source = make_refund(amount=50)
        await refunds.import_refunds([source])
        assert await refunds.get_refund(source.refund_id) == source
        with pytest.raises(ValueError, match=WORDED):
            await refunds.import_refunds([make_refund(), source])
        assert await refunds.list_refunds() == [source]
        assert await refunds.create_refund(make_refund(source.purchase_id, 51), paid=100) == (
            OverRefund(source.purchase_id, 50)
        )
