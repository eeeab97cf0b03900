"""The store contract on moving a seller: ``export_items`` and ``import_items`` (``PortableStore``).

``x402srv export`` / ``import`` move a seller between stores, so what one store
exports must come back whole from another: every record with its history and
grant, every payment and txHash claim where it was, task versions, credit
accounts with their entries, lease fences. Here a store's export is imported
into a fresh store of the same kind (``fresh_store``), which must then answer
every lookup as the first did and export the same items again; the memory
store, imported into as well, shows the export is what every store writes.
Stores without the methods, or whose test class gives no ``fresh_store``, skip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from x402srv.access.records import ChallengeRecord, State
from x402srv.interfaces import (
    CreditAccount,
    CreditStore,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    MigratingStore,
    PaymentClaimed,
    PortableStore,
    Store,
    TxClaimed,
    UsageStore,
    UsedCall,
)
from x402srv.plugin import keeps_credits
from x402srv.testing.builders import (
    BASE_TIME,
    make_key,
    make_payment,
    make_record,
    new_id,
    new_tx_hash,
)
from x402srv.testing.store_contract_base import (
    StoreContractBase,
    applied,
    back_to_pending,
    claiming_delivery,
    created,
    delivering,
    given_back,
    paid,
    settling,
)
from x402srv.testing.store_contract_owed import owed_record

__all__ = ["TransferContract", "exported", "normalized"]

#: More records than any built-in store exports per page (500).
EXPORT_PAGE = 500
#: Accounts live until then in these tests; the import's ``now`` is before it.
KEEP = BASE_TIME + 86_400
NOW = BASE_TIME + 60


def _portable(store: Store) -> PortableStore:
    if not isinstance(store, PortableStore):
        pytest.skip(f"the store {store.name!r} cannot export (not a PortableStore)")
    return store


async def exported(store: Store) -> list[ExportItem]:
    """Everything ``store`` exports, in the order it exports it."""
    return [item async for item in _portable(store).export_items()]


def normalized(items: list[ExportItem]) -> list[tuple[str, Any]]:
    """Items in one order whatever the store's, with claims sorted (no order is promised)."""
    keyed: list[tuple[str, Any]] = []
    for item in items:
        if isinstance(item, ExportedChallenge):
            claims = (tuple(sorted(item.payment_claims)), tuple(sorted(item.tx_claims)))
            keyed.append((f"0 {item.record.challenge_id}", (item.record, claims)))
        elif isinstance(item, ExportedTask):
            keyed.append((f"1 {item.task_id}", item))
        elif isinstance(item, CreditAccount):
            keyed.append((f"2 {item.grant_id}", item))
        else:
            keyed.append((f"3 {item.name}", item))
    return sorted(keyed, key=lambda pair: pair[0])


def _kinds_in_order(items: list[ExportItem]) -> list[int]:
    order = {ExportedChallenge: 0, ExportedTask: 1, CreditAccount: 2, ExportedLease: 3}
    return [order[type(item)] for item in items]


class TransferContract(StoreContractBase):
    """Part of ``StoreContract``: export everything, import it into an empty store."""

    def fresh_store(self, store: Store) -> Store:
        """A new, unopened, empty store of ``store``'s kind on a backend of its own."""
        raise NotImplementedError("give fresh_store() to run the export/import contract")

    @pytest.fixture
    async def fresh(self, store: Store) -> AsyncIterator[Store]:
        _portable(store)
        try:
            other = self.fresh_store(store)
        except NotImplementedError:
            pytest.skip(f"the test class of {store.name!r} gives no fresh_store()")
        if isinstance(other, MigratingStore):
            await other.migrate()
        await other.start()
        yield other
        await other.close()

    async def _populate(self, store: Store) -> dict[str, Any]:
        """One of everything a seller's store holds, each away from its defaults."""
        pending = make_record(at=BASE_TIME + 1)
        await created(store, pending)
        delivered, key, tx = make_record(), make_key(), new_tx_hash()
        await created(store, delivered)
        applied(await store.transition(settling(delivered, key, attempt_id="settle-1")))
        done = applied(await store.transition(paid(delivered, tx)))
        claim = claiming_delivery(done, attempt_id="settle-1", new_attempt="deliver-1")
        applied(await store.transition(claim))
        delivered = applied(await store.transition(delivering(done, attempt_id="deliver-1")))
        discovered_key = make_key()
        discovered = make_record(
            state=State.SETTLING, implicit=True, payment=make_payment(discovered_key)
        )
        await created(store, discovered, discovered_key)
        released, released_key = make_record(), make_key()
        await created(store, released)
        applied(await store.transition(settling(released, released_key)))
        released = applied(await store.transition(back_to_pending(released)))
        assert await store.save_task("t-1", {"status": "working"}, expect_version=None) == 1
        assert await store.save_task("t-1", {"status": "done"}, expect_version=1) == 2
        due = await store.save_task("t-2", {"n": [1, 2.5]}, expect_version=None, prune_after=NOW)
        assert due == 1
        lease = await store.acquire_lease("gas-wallet", "worker-1", 30, BASE_TIME)
        assert lease is not None
        assert await store.release_lease(lease, "nonce=41")
        again = await store.acquire_lease("gas-wallet", "worker-2", 30, BASE_TIME + 1)
        assert again is not None
        grant = None
        if keeps_credits(store):
            assert isinstance(store, CreditStore)
            grant = new_id()
            await store.credit(grant, 100, key=grant, now=BASE_TIME, keep_until=KEEP)
            await store.credit(grant, 50, key="top-up", now=BASE_TIME + 1, keep_until=KEEP)
            await store.spend(grant, 7, now=BASE_TIME + 2, keep_until=KEEP)
            await store.refund(grant, 2, now=BASE_TIME + 3)
            if isinstance(store, UsageStore):  # a call charged by use, and its record
                await store.spend(grant, 10, now=BASE_TIME + 4, keep_until=KEEP)
                call = UsedCall(BASE_TIME + 5, "/v1/complete", 10, 4)
                await store.settle(grant, 6, now=BASE_TIME + 5, call=call)
        return {
            "records": [pending, delivered, discovered, released],
            "key": key,
            "tx": tx,
            "discovered_key": discovered_key,
            "released_key": released_key,
            "grant": grant,
        }

    async def test_an_empty_store_exports_nothing(self, store: Store) -> None:
        assert await exported(store) == []

    async def test_export_lists_every_kind_in_order(self, store: Store) -> None:
        made = await self._populate(store)
        items = await exported(store)
        assert _kinds_in_order(items) == sorted(_kinds_in_order(items))
        challenges = {i.record.challenge_id: i for i in items if isinstance(i, ExportedChallenge)}
        pending, delivered, discovered, released = made["records"]
        assert challenges[pending.challenge_id] == ExportedChallenge(pending)
        assert challenges[delivered.challenge_id] == ExportedChallenge(
            delivered, (str(made["key"]),), (made["tx"].lower(),)
        )
        assert challenges[discovered.challenge_id].payment_claims == (str(made["discovered_key"]),)
        assert challenges[released.challenge_id] == ExportedChallenge(released)
        tasks = {i.task_id: i for i in items if isinstance(i, ExportedTask)}
        assert tasks == {
            "t-1": ExportedTask("t-1", {"status": "done"}, 2, None),
            "t-2": ExportedTask("t-2", {"n": [1, 2.5]}, 1, NOW),
        }
        assert [i for i in items if isinstance(i, ExportedLease)] == [
            ExportedLease("gas-wallet", 2, "nonce=41")
        ]
        accounts = [i for i in items if isinstance(i, CreditAccount)]
        if made["grant"] is not None:
            assert isinstance(store, CreditStore)
            assert accounts == [await store.get_credits(made["grant"])]

    async def test_an_import_answers_as_the_export_did(self, store: Store, fresh: Store) -> None:
        made = await self._populate(store)
        items = await exported(store)
        await _portable(fresh).import_items(items, now=NOW)
        assert normalized(await exported(fresh)) == normalized(items)
        records: list[ChallengeRecord] = made["records"]
        for record in records:
            assert await fresh.get_challenge(record.challenge_id) == record
            assert await fresh.get_by_request_id(record.request_id) == record
        delivered, discovered = records[1], records[2]
        assert await fresh.get_by_payment(made["key"]) == delivered
        assert await fresh.get_by_tx_hash(made["tx"]) == delivered
        assert await fresh.get_by_payment(made["discovered_key"]) == discovered
        assert await fresh.get_by_payment(made["released_key"]) is None
        listed = await fresh.list_challenges(limit=10)
        assert listed == await store.list_challenges(limit=10)
        # The claims hold in the new store: the payment and the txHash are taken.
        other = make_record()
        await created(fresh, other)
        taken = await fresh.create_challenge(make_record(), claim_payment=made["key"])
        assert taken == PaymentClaimed(delivered.challenge_id)
        applied(await fresh.transition(settling(other)))
        assert await fresh.transition(paid(other, made["tx"])) == TxClaimed(delivered.challenge_id)
        assert await fresh.get_task("t-1") == ({"status": "done"}, 2)
        assert await fresh.save_task("t-1", {"status": "again"}, expect_version=2) == 3
        assert await fresh.prune_tasks(before=NOW + 1) == 1
        # The lease's fence goes on from where it was, with the value its holder left.
        lease = await fresh.acquire_lease("gas-wallet", "worker-3", 30, BASE_TIME + 2)
        assert lease is not None
        assert (lease.fence, lease.value) == (3, "nonce=41")
        if made["grant"] is not None:
            assert isinstance(store, CreditStore)
            assert isinstance(fresh, CreditStore)
            moved = await fresh.get_credits(made["grant"])
            assert moved is not None
            assert moved == await store.get_credits(made["grant"])
            if isinstance(store, UsageStore):  # the calls charged by use moved with it
                assert [(c.route, c.reserved, c.charged) for c in moved.used_calls] == [
                    ("/v1/complete", 10, 4)
                ]
            again = await fresh.credit(made["grant"], 50, key="top-up", now=NOW, keep_until=KEEP)
            assert (again.balance, again.applied) == (moved.balance, False)

    async def test_the_memory_store_reads_every_export(self, store: Store) -> None:
        from x402srv.default_plugins.memory_store import MemoryStore

        await self._populate(store)
        items = await exported(store)
        memory = MemoryStore()
        await memory.import_items(items, now=NOW)
        assert normalized(await exported(memory)) == normalized(items)

    async def test_an_import_refuses_what_exists_and_writes_nothing(
        self, store: Store, fresh: Store
    ) -> None:
        await self._populate(store)
        items = await exported(store)
        target = _portable(fresh)
        await target.import_items(items, now=NOW)
        before = normalized(await exported(fresh))
        challenge = next(i for i in items if isinstance(i, ExportedChallenge))
        task = next(i for i in items if isinstance(i, ExportedTask))
        new = ExportedChallenge(make_record())
        clashes: list[list[ExportItem]] = [
            [new, challenge],
            [new, ExportedChallenge(make_record(request_id=challenge.record.request_id))],
            [new, task],
        ]
        for clash in clashes:
            with pytest.raises(ValueError, match=r"\w"):
                await target.import_items(clash, now=NOW)
            assert normalized(await exported(fresh)) == before
        stolen = next(i for i in items if isinstance(i, ExportedChallenge) and i.tx_claims)
        thief = ExportedChallenge(make_record(), (), stolen.tx_claims)
        with pytest.raises(ValueError, match=r"\w"):
            await target.import_items([thief], now=NOW)
        assert normalized(await exported(fresh)) == before

    async def test_an_owed_record_moves_with_its_state_and_claims(
        self, store: Store, fresh: Store
    ) -> None:
        owed, key, tx = await owed_record(store)
        items = await exported(store)
        await _portable(fresh).import_items(items, now=NOW)
        assert await fresh.get_challenge(owed.challenge_id) == owed
        assert await fresh.list_challenges(states=[State.OWED]) == [owed]
        assert await fresh.get_by_payment(key) == owed
        assert await fresh.get_by_tx_hash(tx) == owed

    async def test_a_payment_given_back_moves_with_its_claim(
        self, store: Store, fresh: Store
    ) -> None:
        """A PENDING record keeps the payment a settler gave back and its claim: both move
        with it (docs/protocol/proof.md, docs/protocol/states.md)."""
        record, key = make_record(), make_key()
        await created(store, record)
        applied(await store.transition(settling(record, key)))
        back = applied(await store.transition(given_back(record)))
        assert back.payment is not None
        items = await exported(store)
        await _portable(fresh).import_items(items, now=NOW)
        assert await fresh.get_by_payment(key) == back
        other = await fresh.create_challenge(make_record(), claim_payment=key)
        assert other == PaymentClaimed(record.challenge_id)

    async def test_a_large_export_pages_through_everything(
        self, store: Store, fresh: Store
    ) -> None:
        records = [make_record(at=BASE_TIME + i % 7) for i in range(EXPORT_PAGE + 100)]
        for record in records:
            await created(store, record)
        items = await exported(store)
        assert sorted(i.record.challenge_id for i in items if isinstance(i, ExportedChallenge)) == (
            sorted(r.challenge_id for r in records)
        )
        await _portable(fresh).import_items(items, now=NOW)
        assert len(await fresh.list_challenges(limit=2000)) == len(records)
