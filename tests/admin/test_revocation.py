"""Revoking a grant, in process: the list, the history line, the replay, the verifiers.

The pipeline is the real one on the session's anvil (``tests.support.rig``),
its settler really settles, its issuer is the real ``jwt`` one. Verifiers read
the list through ``StoreRevocations`` with injected clocks, so "within
``refresh_seconds``" is checked without sleeping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, Rig, granted, outcome, problem
from tests.support.scripted import OnChain, ScriptedSettler
from tests.support.seller import JWT_SECRET
from x402srv.access.records import State
from x402srv.errors import (
    NotFound,
    RevocationsUnavailable,
    StateConflict,
    StoreUnavailable,
    TokenRevoked,
)
from x402srv.tokens.revocation import (
    DOCUMENT_ID,
    LEEWAY_SECONDS,
    RevocationBook,
    StoreRevocations,
    revoke_grant,
)
from x402srv.tokens.verify import HS256KeySource, TokenVerifier


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def delivered(
    make_rig: MakeRig, buyer: LocalAccount, **options: Any
) -> tuple[Rig, dict[str, Any]]:
    rig = await make_rig(settler=ScriptedSettler(), **options)
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    grant = granted(await outcome(rig.pay(payment, request_id=challenge["requestId"])))
    return rig, grant


def verifier_of(rig: Rig, revocations: StoreRevocations) -> TokenVerifier:
    url = rig.config.seller.agent_url
    return TokenVerifier(
        HS256KeySource(JWT_SECRET),
        issuer=url,
        audience=url,
        clock=rig.clock,
        revocations=revocations,
    )


async def test_revoking_lists_the_grant_and_writes_its_history_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig, grant = await delivered(make_rig, buyer)
    challenge_id = grant["challengeId"]
    record, revoked_now = await revoke_grant(rig.pipeline, challenge_id, reason="chargeback")
    assert revoked_now and record.state is State.DELIVERED
    assert record.revoked_at == rig.clock()
    assert record.history[-1].reason == "revoked: chargeback"
    again, revoked_again = await revoke_grant(rig.pipeline, challenge_id, reason="twice")
    assert not revoked_again and again == record
    stored = await rig.record(challenge_id)
    assert [step.reason for step in stored.history].count("revoked: chargeback") == 1
    assert not any("twice" in step.reason for step in stored.history)
    listed = await RevocationBook(rig.store.inner).active(rig.clock())
    assert set(listed) == {challenge_id}
    # Listed until the token's exp (+ the leeway a verifier may allow), then dropped.
    expires = rig.clock() + rig.config.plan_map["hourly"].token_ttl_seconds
    assert listed[challenge_id] == pytest.approx(expires + LEEWAY_SECONDS, abs=1)
    assert await RevocationBook(rig.store.inner).active(listed[challenge_id]) == {}


async def test_concurrent_revocations_write_one_line(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig, grant = await delivered(make_rig, buyer)
    others = [rig.competitor() for _ in range(5)]
    results = await asyncio.gather(
        *(revoke_grant(p, grant["challengeId"]) for p in [rig.pipeline, *others])
    )
    assert sum(1 for _, now in results if now) == 1
    stored = await rig.record(grant["challengeId"])
    assert sum(step.reason.startswith("revoked") for step in stored.history) == 1


async def test_a_revoked_purchase_is_not_handed_out_again(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The buyer's replay (with its requestId) answers 410 GRANT_REVOKED, not the token."""
    rig, grant = await delivered(make_rig, buyer)
    again = granted(await outcome(rig.pay(None, request_id=grant["requestId"])))
    assert again == grant
    await revoke_grant(rig.pipeline, grant["challengeId"])
    refused = problem(
        await outcome(rig.pay(None, request_id=grant["requestId"])), 410, "GRANT_REVOKED"
    )
    assert grant["accessToken"] not in str(refused.to_problem())


async def test_only_a_delivered_grant_can_be_revoked(make_rig: MakeRig) -> None:
    rig = await make_rig()
    challenge = await rig.challenge()
    with pytest.raises(StateConflict, match="PENDING"):
        await revoke_grant(rig.pipeline, challenge["challengeId"])
    with pytest.raises(NotFound):
        await revoke_grant(rig.pipeline, "no-such-challenge")
    assert await RevocationBook(rig.store.inner).active(rig.clock()) == {}


async def test_a_verifier_refuses_within_refresh_seconds(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig, grant = await delivered(make_rig, buyer)
    ticks = Ticks()
    revocations = StoreRevocations(
        rig.store.inner, refresh_seconds=5, clock=rig.clock, monotonic=ticks
    )
    verifier = verifier_of(rig, revocations)
    token = grant["accessToken"]
    assert (await verifier.verify(token)).challenge_id == grant["challengeId"]
    await revoke_grant(rig.competitor(), grant["challengeId"])  # another worker or instance
    ticks.now = 4.9  # the list this verifier read is not stale yet
    assert (await verifier.verify(token)).challenge_id == grant["challengeId"]
    ticks.now = 5.0
    with pytest.raises(TokenRevoked) as refused:
        await verifier.verify(token)
    assert refused.value.status == 401 and refused.value.code == "TOKEN_REVOKED"
    assert refused.value.headers()["WWW-Authenticate"] == 'Bearer error="invalid_token"'


async def test_the_list_is_read_once_for_concurrent_requests(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    rig, grant = await delivered(make_rig, buyer)
    ticks = Ticks()
    revocations = StoreRevocations(rig.store, refresh_seconds=1, clock=rig.clock, monotonic=ticks)
    verifier = verifier_of(rig, revocations)
    rig.store.forget_calls()
    await asyncio.gather(*(verifier.verify(grant["accessToken"]) for _ in range(20)))
    assert rig.store.calls["get_task"] == 1


async def test_a_store_outage_keeps_the_last_list(make_rig: MakeRig, buyer: LocalAccount) -> None:
    """The store down: the list already read still refuses, nothing raises to the buyer."""
    rig, grant = await delivered(make_rig, buyer, store="sqlite")
    await revoke_grant(rig.pipeline, grant["challengeId"])
    ticks = Ticks()
    revocations = StoreRevocations(rig.store, refresh_seconds=1, clock=rig.clock, monotonic=ticks)
    verifier = verifier_of(rig, revocations)
    with pytest.raises(TokenRevoked):
        await verifier.verify(grant["accessToken"])
    await rig.store.inner.close()  # every read is StoreUnavailable from here on
    with pytest.raises(StoreUnavailable):
        await rig.store.get_task(DOCUMENT_ID)
    ticks.now = 10
    with pytest.raises(TokenRevoked):
        await verifier.verify(grant["accessToken"])


async def test_a_verifier_that_never_read_the_list_refuses_every_token(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The store down before the first read: 503 for any token, never "nothing is revoked"."""
    rig, grant = await delivered(make_rig, buyer, store="sqlite")
    ticks = Ticks()
    revocations = StoreRevocations(rig.store, refresh_seconds=2, clock=rig.clock, monotonic=ticks)
    verifier = verifier_of(rig, revocations)
    await rig.store.inner.close()  # every read is StoreUnavailable from here on
    for _ in range(2):  # the failed read, then the wait for the next one: both refuse
        with pytest.raises(RevocationsUnavailable) as refused:
            await verifier.verify(grant["accessToken"])
        assert refused.value.status == 503 and refused.value.retry_after == 2
    with pytest.raises(StoreUnavailable):  # what the published list answers (503)
        await revocations.current()
    freshness = revocations.freshness()
    assert not freshness.read and freshness.age_seconds is None and freshness.read_at is None
    assert freshness.last_error == "the store is unavailable"


async def test_a_later_list_without_an_entry_does_not_unrevoke_it(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A list that lost an entry (a store restored from an old backup) adds, never replaces."""
    rig, grant = await delivered(make_rig, buyer)
    await revoke_grant(rig.pipeline, grant["challengeId"])
    ticks = Ticks()
    revocations = StoreRevocations(
        rig.store.inner, refresh_seconds=1, clock=rig.clock, monotonic=ticks
    )
    verifier = verifier_of(rig, revocations)
    with pytest.raises(TokenRevoked):
        await verifier.verify(grant["accessToken"])
    _, version = await RevocationBook(rig.store.inner).read()
    await rig.store.inner.save_task(
        DOCUMENT_ID, {"revoked": {}}, expect_version=version, prune_after=None
    )
    ticks.now = 5
    with pytest.raises(TokenRevoked):
        await verifier.verify(grant["accessToken"])
    assert revocations.freshness().age_seconds == 0
    held = await revocations.current()
    assert set(held.revoked) == {grant["challengeId"]} and held.read_at == rig.clock()


async def test_entries_leave_the_list_when_their_tokens_are_over(make_rig: MakeRig) -> None:
    rig = await make_rig()
    book = RevocationBook(rig.store.inner)
    now = rig.clock()
    await book.add("old", now + 10, now)
    await book.add("new", now + 1000, now)
    await book.add("new", now + 500, now)  # never shortened
    assert await book.active(now) == {"old": now + 10, "new": now + 1000}
    await book.add("newer", now + 2000, now + 20)  # a write drops what is over
    document, _ = await rig.store.inner.get_task(DOCUMENT_ID) or ({}, 0)
    assert set(document["revoked"]) == {"new", "newer"}
