"""Lost compare-and-sets before and at the hand-over, at expiry, and the bounded loop.

One named test per way out of ``AccessPipeline`` when its claim (PENDING ->
SETTLING, or a discovery-first create with the claim), its hand-over to the
settler, or its expiry loses to a competitor: the buyer's twin request, another
worker, recovery, an operator. The store (memory, then sqlite) loses on purpose
through ``RacingStore``, just before the chosen compare-and-set, so each branch
is exercised by design and not by timing luck. Each test asserts the exact
answer, the record's final state and history, and what reached the settler.
The clock is frozen; transfers the chain must agree with really happen on anvil.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.racing import FrozenClock, moving, states
from tests.support.rig import MakeRig, Rig, granted, outcome, problem
from tests.support.scripted import (
    OnChain,
    ScriptedSettler,
)
from x402srv.access import moves
from x402srv.access.pipeline import MAX_STEPS
from x402srv.access.records import ChallengeRecord, RecordChanges, State
from x402srv.errors import ProblemError
from x402srv.interfaces import (
    PaymentClaimed,
    Rejected,
    SettlementOutcome,
    SettlementRequest,
    StateMismatch,
    TransitionApplied,
    TransitionRequest,
    Unknown,
)
from x402srv.settlement.chain import ChainUnavailable
from x402srv.wire.offers import AccessGranted, PaymentOffer
from x402srv.wire.reasons import Reason

PENDING, SETTLING, PAID = State.PENDING, State.SETTLING, State.PAID
DELIVERED, EXPIRED, CANCELLED = State.DELIVERED, State.EXPIRED, State.CANCELLED


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    """Every race on both built-in stores: they share the rules, not the atomic machinery."""
    return str(request.param)


def release(record: ChallengeRecord, at: float) -> TransitionRequest:
    """SETTLING -> PENDING as recovery moves a payment never handed on: the claim stays."""
    return moves.release(record, at, "never handed to a settler")


# ------------------------------------------------------------ step 7: PENDING -> SETTLING


async def test_claim_lost_to_a_twin_request_is_409_in_progress(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The same header sent twice at once: the twin's claim lands first, this one gets 409
    SETTLEMENT_IN_PROGRESS and hands nothing to the settler."""
    rig = await make_rig()
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def twin_claims(request: TransitionRequest) -> object:
        assert request.changes.payment is not None
        twin = replace(request.changes.payment, attempt_id="twin")
        return await rig.store.inner.transition(
            replace(request, changes=RecordChanges(payment=twin))
        )

    race = rig.store.before_transition(twin_claims, when=moving(PENDING, SETTLING))
    answer = await outcome(rig.pay(payment))

    assert isinstance(race.results[0], TransitionApplied)
    assert problem(answer, 409, "SETTLEMENT_IN_PROGRESS").retry_after == 2
    record = await rig.record(challenge["challengeId"])
    assert record.payment is not None and record.payment.attempt_id == "twin"
    assert states(record) == [PENDING, SETTLING]
    assert rig.settler.requests == []
    owner = await rig.store.inner.get_by_payment(rig.key(payment))
    assert owner is not None and owner.challenge_id == record.challenge_id


@pytest.mark.parametrize("closed", [EXPIRED, CANCELLED])
async def test_claim_lost_to_expiry_or_cancellation_is_410(
    make_rig: MakeRig, buyer: LocalAccount, closed: State
) -> None:
    """The challenge expired (or an operator cancelled it) just before the claim: 410, the
    payment is not claimed, nothing reaches the settler."""
    rig = await make_rig()
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def close_it(request: TransitionRequest) -> object:
        return await rig.store.inner.transition(
            TransitionRequest(request.challenge_id, PENDING, closed, rig.clock(), "competitor")
        )

    rig.store.before_transition(close_it, when=moving(PENDING, SETTLING))
    answer = await outcome(rig.pay(payment))

    problem(answer, 410, "CHALLENGE_EXPIRED")
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, closed]
    assert record.payment is None
    assert await rig.store.inner.get_by_payment(rig.key(payment)) is None
    assert rig.settler.requests == []


async def test_claim_lost_to_the_same_payment_on_another_challenge_is_409_redeemed(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """One authorization sent to two challenges of the same plan: the other challenge claims
    it first, this one answers 409 TX_ALREADY_REDEEMED and stays PENDING, unclaimed."""
    rig = await make_rig()
    challenge, other = await rig.challenge(), await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def other_claims(request: TransitionRequest) -> object:
        return await rig.store.inner.transition(replace(request, challenge_id=other["challengeId"]))

    race = rig.store.before_transition(other_claims, when=moving(PENDING, SETTLING))
    answer = await outcome(rig.pay(payment))

    assert isinstance(race.results[0], TransitionApplied)
    problem(answer, 409, "TX_ALREADY_REDEEMED")
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING]
    assert record.payment is None
    owner = await rig.store.inner.get_by_payment(rig.key(payment))
    assert owner is not None and owner.challenge_id == other["challengeId"]
    assert rig.settler.requests == []


async def test_discovery_first_claim_lost_to_a_replay_is_answered_from_the_winner(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A discovery-first payment replayed at once: the replay creates the challenge and
    settles; this request's create finds the payment claimed and answers from the winner's
    record with the same grant (proof: the exact signed authorization), settling nothing."""
    rig = await make_rig()
    discovery = await rig.pay(None, plan_id=None)
    assert isinstance(discovery, PaymentOffer)
    payment = rig.sign(buyer, discovery.body["accepts"][0])
    winner = rig.competitor(settler=ScriptedSettler(OnChain(rig.devchain, rig.relayer)))

    async def replay_wins(record: ChallengeRecord) -> object:
        return await rig.pay(payment, plan_id=None, pipeline=winner)

    race = rig.store.before_create(replay_wins, when=lambda record: record.implicit)
    grant = granted(await outcome(rig.pay(payment, plan_id=None)))

    (winner_answer,) = race.results
    assert isinstance(winner_answer, AccessGranted)
    assert grant == winner_answer.grant
    assert rig.settler.requests == []
    record = await rig.record(grant["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, SETTLING, PAID, DELIVERED]
    assert record.implicit


async def test_discovery_first_claim_lost_to_a_challenge_is_409_redeemed(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A discovery-first payment whose authorization a challenge-first purchase claimed a
    moment earlier: the create finds it claimed by a challenge that is not a discovery-first
    one, so 409 TX_ALREADY_REDEEMED; no record is created and nothing is settled."""
    rig = await make_rig()
    discovery = await rig.pay(None, plan_id=None)
    assert isinstance(discovery, PaymentOffer)
    payment = rig.sign(buyer, discovery.body["accepts"][0])
    challenge = await rig.challenge()

    async def challenge_claims(record: ChallengeRecord) -> object:
        other = rig.competitor(settler=ScriptedSettler(Unknown("facilitator timed out")))
        return await outcome(
            rig.pay(payment, pipeline=other, challenge_id=challenge["challengeId"])
        )

    race = rig.store.before_create(challenge_claims, when=lambda record: record.implicit)
    answer = await outcome(rig.pay(payment, plan_id=None))

    problem(answer, 409, "TX_ALREADY_REDEEMED")
    (other_answer,) = race.results
    assert isinstance(other_answer, ProblemError) and other_answer.status == 502
    owner = await rig.store.inner.get_by_payment(rig.key(payment))
    assert owner is not None and owner.challenge_id == challenge["challengeId"]
    assert rig.settler.requests == []
    assert len(await rig.store.inner.list_challenges()) == 1


# ------------------------------------------------------------ step 8: the hand-over


def released_by_recovery(rig: Rig) -> Callable[[TransitionRequest], Awaitable[object]]:
    """Recovery in another worker, run when the hand-over is about to be written: the lease
    has run out, and a claim never handed to a settler is released."""

    async def recovery_releases(request: TransitionRequest) -> object:
        rig.clock.advance(rig.config.settlement.lease_seconds + 1)
        return await rig.competitor().resolve(await rig.record(request.challenge_id))

    return recovery_releases


async def test_submit_lost_to_a_release_claims_again_and_settles_once(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """This request stalled between claim and hand-over longer than the lease; recovery in
    another worker released the claim ("never handed to a settler"). The hand-over CAS is
    lost, the request reads PENDING, claims again and settles: one settler call, one grant."""
    rig = await make_rig(settler=ScriptedSettler())
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    race = rig.store.before_transition(
        released_by_recovery(rig), when=moving(SETTLING, SETTLING, "handed to settler")
    )
    grant = granted(await outcome(rig.pay(payment)))

    released = race.results[0]
    assert isinstance(released, ChallengeRecord) and released.state is PENDING
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [
        PENDING,
        SETTLING,  # claimed
        PENDING,  # released by recovery
        SETTLING,  # claimed again
        SETTLING,  # handed to the settler
        SETTLING,  # broadcast
        PAID,
        DELIVERED,
    ]
    assert len(rig.settler.requests) == 1
    assert grant["txHash"] == record.tx_hash


async def test_submit_lost_to_the_chain_showing_it_paid_never_calls_the_settler(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The authorization was used on-chain behind this request's back (the buyer also gave
    it to a facilitator) and another worker resolved the record PAID: the hand-over CAS is
    lost, the request delivers from PAID and nothing is handed to the settler."""
    rig = await make_rig()
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def paid_elsewhere(request: TransitionRequest) -> object:
        tx_hash = rig.settle_on_chain(payment)
        resolved = await rig.competitor().resolve(await rig.record(request.challenge_id))
        assert resolved.tx_hash == tx_hash
        return resolved

    rig.store.before_transition(paid_elsewhere, when=moving(SETTLING, SETTLING, "handed"))
    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, PAID, DELIVERED]
    assert record.history[2].reason == "resolved from chain: transferred"
    assert grant["txHash"] == record.tx_hash
    assert rig.settler.requests == []


class Prechecking(ScriptedSettler):
    """A scripted settler with a ``precheck``, which the pipeline runs during the hand-over."""

    def __init__(self, refuse: Rejected | None = None, fail: Exception | None = None) -> None:
        super().__init__()
        self.refuse = refuse
        self.fail = fail
        self.prechecks: list[SettlementRequest] = []

    async def precheck(self, request: SettlementRequest) -> SettlementOutcome | None:
        self.prechecks.append(request)
        if self.fail is not None:
            raise self.fail
        return self.refuse


async def test_submit_lost_while_a_precheck_ran_sends_nothing_until_claimed_again(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """The precheck runs while the hand-over is written, and that write is lost to recovery:
    the check is dropped, nothing reaches the settler until the request has claimed and
    handed over again, and the settler then settles once on that attempt's own check."""
    rig = await make_rig(settler=Prechecking())
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    rig.store.before_transition(
        released_by_recovery(rig), when=moving(SETTLING, SETTLING, "handed to settler")
    )
    grant = granted(await outcome(rig.pay(payment)))

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [
        PENDING,
        SETTLING,  # claimed
        PENDING,  # released by recovery while the first precheck ran
        SETTLING,  # claimed again
        SETTLING,  # handed to the settler
        SETTLING,  # broadcast
        PAID,
        DELIVERED,
    ]
    settler = rig.settler
    assert isinstance(settler, Prechecking)
    assert len(settler.prechecks) == 2  # one per hand-over, the first one dropped
    [settled] = settler.requests
    assert settled.prechecked and settled.attempt_id == settler.prechecks[1].attempt_id
    assert grant["txHash"] == record.tx_hash


async def test_a_precheck_refusal_releases_the_claim_and_never_reaches_the_settler(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    refusal = Rejected(Reason.INSUFFICIENT_BALANCE, "The payer's token balance is too low.")
    rig = await make_rig(settler=Prechecking(refuse=refusal))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    problem(await outcome(rig.pay(payment)), 402, "PAYMENT_FAILED")

    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, SETTLING, SETTLING, PENDING]  # claimed, handed, released
    # Kept, its lease over: the precheck's node saw it too, and the chain still decides it
    # before the challenge ends (docs/protocol/states.md, "A payment given back").
    assert record.payment is not None and record.payment.nonce == payment.nonce
    assert record.payment.lease_until <= rig.clock()
    assert rig.settler.requests == []


async def test_a_precheck_that_cannot_tell_is_said_once_and_settle_is_told(
    make_rig: MakeRig, buyer: LocalAccount, caplog: pytest.LogCaptureFixture
) -> None:
    """A precheck whose node hung raises; ``settle`` gets the request marked
    ``precheck_failed`` (the facilitator asks /verify then, not the same node again),
    and the log says so at warning, once."""
    hung = ChainUnavailable("eth_call: RPC request failed (ReadTimeout)")
    rig = await make_rig(settler=Prechecking(fail=hung))
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    with caplog.at_level(logging.WARNING, logger="x402srv.access.pipeline"):
        granted(await outcome(rig.pay(payment)))

    [settled] = rig.settler.requests
    assert settled.precheck_failed and not settled.prechecked
    said = [r.getMessage() for r in caplog.records if "could not check" in r.getMessage()]
    assert len(said) == 1 and "ReadTimeout" in said[0], said


class PlainPrecheck(ScriptedSettler):
    """A plugin's settler whose ``precheck`` is a plain function, not the async one asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.prechecks = 0

    def precheck(self, request: SettlementRequest) -> SettlementOutcome | None:
        self.prechecks += 1
        return None


async def test_a_precheck_that_is_not_async_is_never_run_and_the_payment_settles(
    make_rig: MakeRig, buyer: LocalAccount, caplog: pytest.LogCaptureFixture
) -> None:
    """Starting a plain function as a task raised TypeError after the claim: a 500, the
    payment held until its lease ran out. It is now no precheck at all, said at start-up."""
    with caplog.at_level(logging.WARNING, logger="x402srv.settlement"):
        rig = await make_rig(settler=PlainPrecheck())
    assert any("precheck is not an async function" in r.getMessage() for r in caplog.records)
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    granted(await outcome(rig.pay(payment)))

    settler = rig.settler
    assert isinstance(settler, PlainPrecheck) and settler.prechecks == 0
    [settled] = settler.requests
    assert not settled.prechecked and not settled.precheck_failed


# ------------------------------------------------------------ step 4: expiry


async def test_expire_lost_to_another_expiry_is_410_once(
    make_rig: MakeRig, request_id: str
) -> None:
    """Two requests see the same challenge past expiresAt; the other expires it first. This
    one's CAS is lost and it answers 410 too; the record holds one EXPIRED entry."""
    rig = await make_rig()
    challenge = await rig.challenge()
    rig.clock.advance(rig.config.server.challenge_ttl_seconds)

    async def other_expires(request: TransitionRequest) -> object:
        return await rig.competitor().expire(await rig.record(request.challenge_id))

    race = rig.store.before_transition(other_expires, when=moving(PENDING, EXPIRED))
    answer = await outcome(rig.pay(None, request_id=challenge["requestId"]))

    problem(answer, 410, "CHALLENGE_EXPIRED")
    assert race.fired == 1
    (ours,) = [result for request, result in rig.store.transitions if request.to is EXPIRED]
    assert isinstance(ours, StateMismatch)
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING, EXPIRED]


async def test_expire_lost_to_a_settlement_answers_from_settling(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """A payment checked a moment before expiresAt was claimed by another worker (its clock
    2 s behind) while this retry found the challenge past expiresAt. The expiry is lost: the
    record is SETTLING, not EXPIRED, so the buyer must not be told 410 (its payment may be
    on its way on-chain); it is answered from SETTLING."""
    rig = await make_rig()
    challenge = await rig.challenge()
    rig.clock.advance(rig.config.server.challenge_ttl_seconds)
    payment = rig.sign(buyer, challenge["accepts"][0])
    behind = FrozenClock(rig.clock() - 2)
    other = rig.competitor(settler=ScriptedSettler(Unknown("facilitator timed out")), clock=behind)

    async def other_claims(request: TransitionRequest) -> object:
        return await outcome(rig.pay(payment, pipeline=other))

    race = rig.store.before_transition(other_claims, when=moving(PENDING, EXPIRED))
    answer = await outcome(rig.pay(None, request_id=challenge["requestId"]))

    (other_answer,) = race.results
    assert isinstance(other_answer, ProblemError)
    problem(other_answer, 502, "SETTLEMENT_PENDING")
    problem(answer, 502, "SETTLEMENT_PENDING")
    record = await rig.record(challenge["challengeId"])
    assert record.state is SETTLING
    assert EXPIRED not in states(record)


# ------------------------------------------------------------ the bounded loop


async def test_max_steps_exhausted_is_409_in_progress(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Recovery releases the claim before every hand-over, so each step ends in a lost race:
    after MAX_STEPS the request gives up with 409 SETTLEMENT_IN_PROGRESS (Retry-After 1)
    instead of looping, and nothing was handed to the settler."""
    rig = await make_rig()
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])

    async def recovery_releases(request: TransitionRequest) -> object:
        record = await rig.record(request.challenge_id)
        return await rig.store.inner.transition(release(record, rig.clock()))

    race = rig.store.before_transition(
        recovery_releases, when=moving(SETTLING, SETTLING, "handed"), times=None
    )
    answer = await outcome(rig.pay(payment))

    assert problem(answer, 409, "SETTLEMENT_IN_PROGRESS").retry_after == 1
    assert race.fired == MAX_STEPS
    assert all(isinstance(result, TransitionApplied) for result in race.results)
    assert rig.settler.requests == []
    record = await rig.record(challenge["challengeId"])
    assert states(record) == [PENDING] + [SETTLING, PENDING] * MAX_STEPS
    owner = await rig.store.inner.get_by_payment(rig.key(payment))  # kept, and taken again
    assert owner is not None and owner.challenge_id == challenge["challengeId"]
    assert not any(isinstance(result, PaymentClaimed) for _, result in rig.store.transitions)
