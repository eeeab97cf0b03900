"""The automatic refund of a purchase not delivered in time (``auto_undelivered_after_seconds``).

In process on the session's anvil: the purchase and the refund are really
settled on-chain (``OnChain``), so money facts are counted from the token's
Transfer events. What cannot be real on cue is scripted: the issuer that keeps
failing (``CountingIssuer``), the clock that passes the deadline
(``FrozenClock``), and the moment a delivery or another instance gets in ahead
of the rule (``RacingStore.before_transition``).
"""

from __future__ import annotations

from dataclasses import replace

from eth_account.signers.local import LocalAccount

from tests.support.purchase import HOURLY
from tests.support.racing import moving
from tests.support.rig import MakeRig, Rig, granted, outcome, problem
from tests.support.scripted import CountingIssuer, OnChain, ScriptedSettler
from x402srv.a2a.documents import Note, Purchase, TaskState, new_id
from x402srv.a2a.outcomes import Update, new_task
from x402srv.a2a.repository import TaskRepository
from x402srv.a2a.service import A2AService
from x402srv.access import moves
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import ChallengeRecord, RecordChanges, State
from x402srv.devchain import Devchain
from x402srv.interfaces import CreditStore, TransitionApplied, TransitionRequest
from x402srv.refunds.automatic import UNUSED_MARK, undelivered, unused_share
from x402srv.refunds.records import RefundRecord, RefundState
from x402srv.refunds.running import revoke
from x402srv.refunds.store import RefundStore
from x402srv.tokens.revocation import RevocationBook, _revoking
from x402srv.usage.figures import funnel, period, revenue

DEADLINE = 600


async def late_rig(make_rig: MakeRig, devchain: Devchain) -> tuple[Rig, LocalAccount]:
    """A seller whose issuer is down, with the rule on and a refund wallet of tokens, no ETH."""
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    rig = await make_rig(
        settler=ScriptedSettler(),
        issuer=lambda clock: CountingIssuer(clock, fail=1000),
        refunds={
            "private_key": "0x" + bytes(wallet.key).hex(),
            "auto_undelivered_after_seconds": DEADLINE,
        },
    )
    return rig, wallet


async def paid_not_delivered(rig: Rig, buyer: LocalAccount) -> ChallengeRecord:
    """A purchase settled on-chain whose credential could not be issued (500, stays PAID)."""
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    problem(await outcome(rig.pay(payment)), 500, "INTERNAL_ERROR")
    record = await rig.record(challenge["challengeId"])
    assert record.state is State.PAID
    return record


async def reconcile(rig: Rig) -> None:
    """One reconciler pass of the rig's pipeline; a refund it sends settles on anvil."""
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    await Reconciler(rig.pipeline, rig.config.reconciler).run_once(grace_seconds=0)


async def refunds_of(rig: Rig, purchase_id: str) -> list[RefundRecord]:
    store = rig.store.inner
    assert isinstance(store, RefundStore)
    return await store.list_refunds(purchase_id=purchase_id)


async def test_a_purchase_not_delivered_in_time_is_refunded_once(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    rig, wallet = await late_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start = devchain.rpc.block_number() + 1
    record = await paid_not_delivered(rig, buyer)
    assert devchain.balance_of(buyer.address) == 0

    rig.clock.advance(DEADLINE - 1)  # not late yet: the pass only tries to deliver again
    await Reconciler(rig.pipeline, rig.config.reconciler).run_once(grace_seconds=0)
    assert (await rig.record(record.challenge_id)).state is State.PAID
    assert await refunds_of(rig, record.challenge_id) == []

    rig.clock.advance(1)
    await reconcile(rig)
    owed = await rig.record(record.challenge_id)
    assert owed.state is State.OWED
    assert "could not be issued within 600 s" in owed.history[-1].reason
    (refund,) = await refunds_of(rig, record.challenge_id)
    assert (refund.state, refund.asked_by, refund.value) == (
        RefundState.REFUNDED,
        "auto:undelivered",
        HOURLY,
    )
    await Reconciler(rig.pipeline, rig.config.reconciler).run_once(grace_seconds=0)  # no-op
    assert len(await refunds_of(rig, record.challenge_id)) == 1

    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), HOURLY)]
    assert transfers[0].tx_hash.lower() == refund.tx_hash
    assert devchain.balance_of(buyer.address) == HOURLY

    # The console's figures: the sale stays counted, its revenue is refunded to nothing.
    await rig.pipeline.counters.flush()
    counts = await rig.store.inner.read_counts(start=0, end=int(rig.clock()) + 3600)
    (total,) = revenue(counts, period(rig.clock(), None, None, "day"), rig.config)["totals"]
    assert (total["count"], total["amount"], total["refunded"]) == (1, "0", str(HOURLY))
    assert (funnel(counts)["owed"], funnel(counts)["refunded"]) == (1, 1)

    # The buyer's retry, now that an issuer would work: no grant, the refund and its txHash.
    working = rig.competitor(issuer=CountingIssuer(rig.clock))
    told = problem(
        await outcome(rig.pay(None, request_id=record.request_id, pipeline=working)),
        410,
        "GRANT_REFUNDED",
    )
    assert told.extra["txHash"] == refund.tx_hash
    assert working.issuer.calls == 0  # type: ignore[attr-defined]

    # An A2A task of this purchase says so on tasks/get: one left working (credential
    # pending) fails with the refund; a completed one stays completed, with that message.
    service = A2AService(rig.config, rig.pipeline, rig.store, rig.clock)
    purchase = Purchase(record.request_id, record.plan_id, record.resource_id)
    for left, ends in ((TaskState.WORKING, "failed"), (TaskState.COMPLETED, "completed")):
        update = Update(state=left, note=Note("as left"), challenge_id=record.challenge_id)
        task = new_task(new_id(), new_id(), purchase, update, rig.clock(), {"role": "user"})
        await TaskRepository(rig.store, rig.clock, keep_unpaid=3600, keep_paid=86_400).create(task)
        call = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task.task_id}}
        answer = await service.handle_document(call)
        assert isinstance(answer, dict)
        status = answer["result"]["status"]
        assert status["state"] == ends, answer
        metadata = status["message"]["metadata"]
        assert metadata["x402srv.refundTxHash"] == refund.tx_hash
        assert metadata["x402.payment.status"] == "payment-completed"
        assert metadata["x402srv.problem"]["code"] == "GRANT_REFUNDED"
        assert refund.tx_hash in status["message"]["parts"][0]["text"]


async def test_a_delivery_that_gets_in_first_is_never_refunded(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    """The issuer comes back just as the rule moves the late purchase: the store's
    compare-and-set lets the delivery win, and the rule neither owes nor refunds it."""
    rig, wallet = await late_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start = devchain.rpc.block_number() + 1
    record = await paid_not_delivered(rig, buyer)
    rig.clock.advance(DEADLINE)
    working = rig.competitor(issuer=CountingIssuer(rig.clock))

    async def deliver_first(_: TransitionRequest) -> ChallengeRecord:
        return await working.deliver(await rig.record(record.challenge_id))

    race = rig.store.before_transition(deliver_first, when=moving(State.PAID, State.OWED))
    await undelivered(rig.pipeline)
    assert race.fired == 1
    delivered = await rig.record(record.challenge_id)
    assert delivered.state is State.DELIVERED
    assert await refunds_of(rig, record.challenge_id) == []
    assert devchain.transfer_logs(from_address=wallet.address, from_block=start) == []
    grant = granted(await outcome(rig.pay(None, request_id=record.request_id)))
    assert grant["accessToken"] == "token-1"


async def test_a_held_delivery_claim_and_a_second_instance_leave_one_refund(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    """A delivery under way (its claim's lease runs) is not given up on; once it lapsed,
    two instances' passes at once give one OWED move and one refund transfer."""
    rig, wallet = await late_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start = devchain.rpc.block_number() + 1
    record = await paid_not_delivered(rig, buyer)
    rig.clock.advance(DEADLINE)
    assert record.payment is not None
    claim = replace(record.payment, attempt_id="holder", lease_until=rig.clock() + 3)
    held = await rig.store.inner.transition(
        TransitionRequest(
            challenge_id=record.challenge_id,
            expect=State.PAID,
            to=State.PAID,
            at=rig.clock(),
            reason="issuing the credential",
            changes=RecordChanges(payment=claim),
            attempt_id=record.payment.attempt_id,
        )
    )
    assert isinstance(held, TransitionApplied)
    assert await undelivered(rig.pipeline) == []
    assert (await rig.record(record.challenge_id)).state is State.PAID

    rig.clock.advance(3)  # the holder died: its claim lapsed
    other = rig.competitor()
    race = rig.store.before_transition(
        lambda _: undelivered(other), when=moving(State.PAID, State.OWED)
    )
    await reconcile(rig)
    assert race.fired == 1
    owed = await rig.record(record.challenge_id)
    assert [t.state for t in owed.history].count(State.OWED) == 1
    (refund,) = await refunds_of(rig, record.challenge_id)
    assert refund.state is RefundState.REFUNDED
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), HOURLY)]


async def test_a_pass_killed_after_the_owed_move_refunds_on_the_next_pass(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    """The move to OWED applied, then the process died before asking for the refund: the
    next pass finds the OWED purchase without a refund and refunds it, once."""
    rig, wallet = await late_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=HOURLY)
    start = devchain.rpc.block_number() + 1
    record = await paid_not_delivered(rig, buyer)
    rig.clock.advance(DEADLINE)
    left = await rig.store.inner.transition(moves.give_up(record, rig.clock(), "as left"))
    assert isinstance(left, TransitionApplied)
    await reconcile(rig)
    (refund,) = await refunds_of(rig, record.challenge_id)
    assert refund.state is RefundState.REFUNDED
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), HOURLY)]


# ---------------------------------------------------------------- unused credits on revocation

CALLS_3 = {"plan_id": "calls-3", "unit_amount": "$0.01", "description": "Three", "calls": 3}
CALLS_3_AMOUNT = 10_000


async def credits_rig(make_rig: MakeRig, devchain: Devchain) -> tuple[Rig, LocalAccount]:
    wallet = devchain.new_account(eth=0, usdc_atomic=10 * HOURLY)
    rig = await make_rig(
        settler=ScriptedSettler(),
        plans=[CALLS_3],
        refunds={"private_key": "0x" + bytes(wallet.key).hex(), "auto_unused_credits": True},
    )
    return rig, wallet


async def one_call_spent(rig: Rig, buyer: LocalAccount) -> str:
    """A calls-3 grant bought on-chain, one of its three calls spent; its challengeId."""
    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    challenge = await rig.challenge("calls-3")
    payment = rig.sign(buyer, challenge["accepts"][0])
    grant = granted(await outcome(rig.pay(payment, plan_id="calls-3")))
    store = rig.store.inner
    assert isinstance(store, CreditStore)
    spent = await store.spend(
        grant["challengeId"], 1, now=rig.clock(), keep_until=rig.clock() + 86_400
    )
    assert spent.balance == 2
    return str(grant["challengeId"])


async def test_revoking_a_calls_grant_refunds_its_unused_credits_pro_rata(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    """2 of 3 calls unused: 10000 * 2 // 3 = 6666 atomic units back (rounded down), at once."""
    rig, wallet = await credits_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=CALLS_3_AMOUNT)
    start = devchain.rpc.block_number() + 1
    grant_id = await one_call_spent(rig, buyer)

    rig.settler.then(OnChain(rig.devchain, rig.relayer))
    revoked, applied = await revoke(rig.pipeline, grant_id, reason="revoked by the seller")
    assert applied and UNUSED_MARK in revoked.history[-1].reason
    (refund,) = await refunds_of(rig, grant_id)
    assert (refund.state, refund.asked_by, refund.amount) == (
        RefundState.REFUNDED,
        "auto:unused-credits",
        "6666",
    )
    await reconcile(rig)  # the pass finds it done: nothing more
    assert len(await refunds_of(rig, grant_id)) == 1
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), 6666)]
    assert devchain.balance_of(buyer.address) == 6666
    replay = rig.pay(None, request_id=revoked.request_id, plan_id="calls-3")
    told = problem(await outcome(replay), 410, "GRANT_REFUNDED")
    assert told.extra["txHash"] == refund.tx_hash


async def test_a_revocation_killed_before_its_refund_is_finished_by_the_pass(
    make_rig: MakeRig, devchain: Devchain
) -> None:
    """The grant was revoked with the rule's mark, then the process died: the next pass
    asks for the pro-rata refund and sends it, once."""
    rig, wallet = await credits_rig(make_rig, devchain)
    buyer = devchain.new_account(eth=0, usdc_atomic=CALLS_3_AMOUNT)
    start = devchain.rpc.block_number() + 1
    grant_id = await one_call_spent(rig, buyer)
    record = await rig.record(grant_id)
    await RevocationBook(rig.store.inner).add(grant_id, rig.clock() + 3600, rig.clock())
    left = await rig.store.inner.transition(
        _revoking(record, rig.clock(), f"{UNUSED_MARK}; revoked by the seller")
    )
    assert isinstance(left, TransitionApplied)
    assert await refunds_of(rig, grant_id) == []

    await reconcile(rig)
    await reconcile(rig)
    (refund,) = await refunds_of(rig, grant_id)
    assert (refund.state, refund.amount) == (RefundState.REFUNDED, "6666")
    transfers = devchain.transfer_logs(from_address=wallet.address, from_block=start)
    assert [(t.to.lower(), t.value) for t in transfers] == [(buyer.address.lower(), 6666)]


def test_the_unused_share_rounds_down_and_never_passes_what_is_left() -> None:
    assert unused_share(10_000, 2, 3, 10_000) == 6666
    assert unused_share(10_000, 3, 3, 4_000) == 4_000  # an operator refunded 6000 already
    assert unused_share(10_000, 0, 3, 10_000) == 0
    assert unused_share(10_000, 5, 3, 10_000) == 10_000  # never more than all of it
