"""What every part of the store contract builds on.

``StoreContractBase`` holds the fixtures a store's test class provides
(``store``, ``durable``, ``another_store``) and the ones the contract derives
from them (``reopen``, ``second``, ``sharing``). The functions below build the
transitions the pipeline asks for, the way it builds them, so a test names the
move it makes (``settling``, ``paid``, ``claiming_delivery`` ...) and spells
out only what it is about. ``StoreContract`` (``store_contract``) combines this
with the topic mixins (``store_contract_listing``, ``store_contract_counters``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import pytest

from x402srv.access.records import (
    ChallengeRecord,
    Offer,
    PaymentKey,
    RecordChanges,
    State,
    Transition,
)
from x402srv.interfaces import Store, TransitionApplied, TransitionRequest, TransitionResult
from x402srv.testing.builders import (
    BASE_TIME,
    make_grant,
    make_key,
    make_payment,
    make_record,
    new_id,
    new_tx_hash,
)

__all__ = [
    "RACERS",
    "WORDED",
    "Reopen",
    "StoreContractBase",
    "applied",
    "back_to_pending",
    "claiming_delivery",
    "created",
    "delivering",
    "expiring",
    "full_record",
    "given_back",
    "move",
    "owing",
    "paid",
    "settling",
    "settling_again",
    "tx_is_free",
]

#: Closes the current store and returns a new opened one on the same backend.
Reopen = Callable[[], Awaitable[Store]]

RACERS = 20
#: Programming errors raise ValueError with a message; the contract leaves the wording to the store.
WORDED = r"\w"


class StoreContractBase:
    """The fixtures every contract mixin may use; a store's test class provides ``store``."""

    #: True when data outlives ``close()`` and every instance built by
    #: ``another_store`` sees the same data (sqlite file, Redis server).
    durable: ClassVar[bool] = False

    def another_store(self, store: Store) -> Store:
        """A new, unopened store on the same backend as ``store`` (durable stores)."""
        raise NotImplementedError("durable stores implement another_store()")

    @pytest.fixture
    async def reopen(self, store: Store) -> AsyncIterator[Reopen]:
        if not self.durable:
            pytest.skip("the store keeps nothing across close()")
        opened: list[Store] = []

        async def _reopen() -> Store:
            await (opened[-1] if opened else store).close()
            fresh = self.another_store(store)
            await fresh.start()
            opened.append(fresh)
            return fresh

        yield _reopen
        for each in opened:
            await each.close()

    @pytest.fixture
    async def second(self, store: Store) -> AsyncIterator[Store]:
        """Another instance, open at the same time as ``store``, on the same backend."""
        if not self.durable:
            pytest.skip("the store has no shared backend")
        other = self.another_store(store)
        await other.start()
        yield other
        await other.close()

    @pytest.fixture
    async def sharing(self, store: Store) -> AsyncIterator[tuple[Store, Store]]:
        """Two instances on one backend (``store`` twice when nothing can be shared).

        For guarantees every store gives, that a durable one must also give
        across instances: races run over both, so no store is skipped.
        """
        if not self.durable:
            yield store, store
            return
        other = self.another_store(store)
        await other.start()
        yield store, other
        await other.close()


# ------------------------------------------------------------ transitions the pipeline asks for


def move(
    record: ChallengeRecord,
    expect: State,
    to: State,
    at: float,
    reason: str,
    changes: RecordChanges | None = None,
    **fields: Any,
) -> TransitionRequest:
    """``record`` from ``expect`` to ``to`` at ``at`` for ``reason``; ``fields`` are the rest
    of ``TransitionRequest`` (``attempt_id``, the claims). Each builder below is one move."""
    changes = changes if changes is not None else RecordChanges()
    return TransitionRequest(record.challenge_id, expect, to, at, reason, changes, **fields)


def settling(
    record: ChallengeRecord,
    key: PaymentKey | None = None,
    *,
    attempt_id: str | None = None,
    claim: bool = True,
    at: float = BASE_TIME + 10,
) -> TransitionRequest:
    """PENDING -> SETTLING for ``key`` as pipeline step 7 asks for it."""
    key = key or make_key()
    changes = RecordChanges(payment=make_payment(key, attempt_id=attempt_id))
    claimed = key if claim else None
    return move(
        record, State.PENDING, State.SETTLING, at, "settling", changes, claim_payment=claimed
    )


def settling_again(
    record: ChallengeRecord, attempt_id: str, *, reason: str, at: float, **fields: Any
) -> TransitionRequest:
    """SETTLING -> SETTLING by the attempt that holds it (a broadcast noted, a lease renewed).

    ``fields`` are further ``TransitionRequest`` fields (``changes``, claims).
    """
    return move(record, State.SETTLING, State.SETTLING, at, reason, attempt_id=attempt_id, **fields)


def paid(record: ChallengeRecord, tx_hash: str, *, at: float = BASE_TIME + 20) -> TransitionRequest:
    """SETTLING -> PAID in ``tx_hash``, which the record claims."""
    changes = RecordChanges(tx_hash=tx_hash, payer="0x" + "ab" * 20)
    return move(record, State.SETTLING, State.PAID, at, "settled", changes, claim_tx_hash=tx_hash)


def given_back(record: ChallengeRecord, *, at: float = BASE_TIME + 30) -> TransitionRequest:
    """SETTLING -> PENDING as the pipeline moves it (``moves.release``): nothing moved on-chain,
    and the record keeps both the payment and its claim (a settler saw the payment, and
    anyone it reached may still send it to the token: docs/protocol/states.md, "A payment
    given back")."""
    return move(record, State.SETTLING, State.PENDING, at, "settlement rejected")


def back_to_pending(record: ChallengeRecord, *, at: float = BASE_TIME + 30) -> TransitionRequest:
    """SETTLING -> PENDING with ``release_payment``: the claim is freed (a store still honours
    it; the pipeline itself keeps the claim, ``given_back``)."""
    changes = RecordChanges(clear_payment=True)
    return move(
        record,
        State.SETTLING,
        State.PENDING,
        at,
        "settlement rejected",
        changes,
        release_payment=True,
    )


def expiring(record: ChallengeRecord, *, at: float = BASE_TIME + 900) -> TransitionRequest:
    """PENDING -> EXPIRED, as the reconciler moves a challenge past its ``expires_at``; one that
    holds a payment given back on the payment's attempt as read, dropping the payment."""
    if record.payment is None:
        return move(record, State.PENDING, State.EXPIRED, at, "expired")
    changes = RecordChanges(clear_payment=True)
    attempt = record.payment.attempt_id
    return move(record, State.PENDING, State.EXPIRED, at, "expired", changes, attempt_id=attempt)


def claiming_delivery(
    record: ChallengeRecord, *, attempt_id: str, new_attempt: str, at: float = BASE_TIME + 30
) -> TransitionRequest:
    """PAID -> PAID: ``new_attempt`` takes the delivery claim from ``attempt_id``.

    The claim is the payment's ``attempt_id`` and ``lease_until``, as in
    SETTLING, so only the request holding it calls the credential issuer.
    """
    assert record.payment is not None, "a PAID record keeps its payment"
    claim = dataclasses.replace(record.payment, attempt_id=new_attempt, lease_until=at + 60)
    changes = RecordChanges(payment=claim)
    return move(record, State.PAID, State.PAID, at, "delivering", changes, attempt_id=attempt_id)


def delivering(
    record: ChallengeRecord,
    grant: dict[str, Any] | None = None,
    *,
    at: float = BASE_TIME + 40,
    attempt_id: str | None = None,
) -> TransitionRequest:
    """PAID -> DELIVERED with ``grant`` (one made for ``record`` unless given)."""
    changes = RecordChanges(grant=grant if grant is not None else make_grant(record))
    return move(
        record, State.PAID, State.DELIVERED, at, "delivered", changes, attempt_id=attempt_id
    )


def owing(record: ChallengeRecord, *, at: float = BASE_TIME + 40) -> TransitionRequest:
    """PAID -> OWED: a top-up whose grant went first; nothing delivered, the money owed back."""
    return move(record, State.PAID, State.OWED, at, "owed to the buyer: grant revoked")


# ------------------------------------------------------------ checks every section uses


def applied(result: TransitionResult) -> ChallengeRecord:
    assert isinstance(result, TransitionApplied), result
    return result.record


async def created(store: Store, record: ChallengeRecord, key: PaymentKey | None = None) -> None:
    result = await store.create_challenge(record, claim_payment=key)
    assert result == (record, True)


async def tx_is_free(store: Store, tx_hash: str) -> None:
    """Proves no claim on ``tx_hash`` was written: a fresh challenge can take it."""
    probe = make_record()
    await created(store, probe)
    applied(await store.transition(settling(probe)))
    applied(await store.transition(paid(probe, tx_hash)))


def full_record() -> tuple[ChallengeRecord, PaymentKey]:
    """A record with every field away from its default, and the key it claims."""
    key = make_key()
    record = make_record(
        state=State.SETTLING,
        at=BASE_TIME + 0.125,
        implicit=True,
        calls=1000,
        top_up_of=new_id(),
        payer=key.payer,
        tx_hash=new_tx_hash(),
        history=(
            Transition(State.PENDING, BASE_TIME + 0.125, "created"),
            Transition(State.SETTLING, BASE_TIME + 1.000001, "settling: attempt 1"),
        ),
    )
    return (
        dataclasses.replace(
            record,
            updated_at=BASE_TIME + 1.000001,
            payment=make_payment(key, broadcast_tx_hash=new_tx_hash()),
            grant=make_grant(record),
            revoked_at=BASE_TIME + 2.5,
            options=(  # a plan paid on two networks, one of them in two tokens
                Offer(record.network, record.asset, record.amount),
                Offer(record.network, "0x" + "ab" * 20, record.amount + "000000000000"),
                Offer("eip155:8453", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "100000"),
            ),
        ),
        key,
    )
