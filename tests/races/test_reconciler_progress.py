"""A reconciler pass never stalls behind undecidable records, and finishes paid ones at once.

Records are made by the pipeline itself (a scripted settler that times out),
their transfers really happen (or not) on anvil, the clock is frozen, and the
store wrapper logs every record each ``list_challenges`` page hands out.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.rig import MakeRig, granted, open_rig, outcome, problem
from tests.support.scripted import CountingIssuer, OnChain, ScriptedSettler
from x402srv.access.reconciler import Reconciler
from x402srv.access.records import State
from x402srv.devchain import Devchain
from x402srv.interfaces import Unknown

TIMED_OUT = Unknown("facilitator timed out")


async def test_undecidable_records_never_stall_a_pass(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Three SETTLING records the chain cannot decide yet (handed over, lease and grace over,
    authorization unused and still valid) fill the first pages (batch_size 2) ahead of one
    whose transfer is on-chain: one pass delivers that one, reports each undecidable record
    exactly once, and reads no record twice."""
    rig = await make_rig(settler=ScriptedSettler(*[TIMED_OUT] * 4), reconciler={"batch_size": 2})
    undecidable = []
    for _ in range(3):
        challenge = await rig.challenge()
        payment = rig.sign(buyer, challenge["accepts"][0])
        problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
        undecidable.append(challenge["challengeId"])
        rig.clock.advance(1)  # each is older than the next
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
    rig.settle_on_chain(payment)  # the facilitator's transfer lands after its timeout
    rig.clock.advance(rig.config.reconciler.grace_seconds + 1)
    reconciler = Reconciler(rig.pipeline, rig.config.reconciler)
    assert rig.config.reconciler.batch_size == 2

    async with asyncio.timeout(60):  # a pass that re-reads its first page never ends: fail
        report = await reconciler.run_once()

    assert report.unresolved == undecidable
    assert [(c.challenge_id, c.before, c.after) for c in report.changes] == [
        (challenge["challengeId"], State.SETTLING, State.PAID),
        (challenge["challengeId"], State.PAID, State.DELIVERED),
    ]
    assert (await rig.record(challenge["challengeId"])).state is State.DELIVERED
    assert rig.store.listed[:4] == [*undecidable, challenge["challengeId"]]
    assert max(Counter(rig.store.listed).values()) == 1, rig.store.listed
    for challenge_id in undecidable:
        record = await rig.record(challenge_id)
        assert record.state is State.SETTLING and record.payment is not None
        assert not rig.devchain.authorization_state(buyer.address, record.payment.nonce)


async def test_a_used_authorization_is_finished_by_the_next_pass_while_its_lease_runs(
    make_rig: MakeRig, buyer: LocalAccount
) -> None:
    """Default settings (lease 120 s, grace 60 s): the settler has broadcast and is still
    waiting for its receipt when a pass runs 1 s later. The transfer is on-chain, so the
    pass finishes the record at once, lease or not; the request then answers with that
    same grant, and the credential was issued once."""
    receipt = asyncio.Event()
    rig = await make_rig(settler=ScriptedSettler(), issuer=CountingIssuer)
    step = OnChain(rig.devchain, rig.relayer, gate=receipt)
    rig.settler.then(step)
    challenge = await rig.challenge()
    payment = rig.sign(buyer, challenge["accepts"][0])
    request = asyncio.create_task(outcome(rig.pay(payment)))
    await step.broadcast.wait()
    rig.clock.advance(1)
    settling = await rig.record(challenge["challengeId"])
    assert settling.state is State.SETTLING
    assert settling.payment is not None
    assert settling.payment.lease_until > rig.clock() + rig.config.reconciler.grace_seconds

    report = await Reconciler(rig.pipeline, rig.config.reconciler).run_once()

    delivered = await rig.record(challenge["challengeId"])
    assert delivered.state is State.DELIVERED
    assert [c.after for c in report.changes] == [State.PAID, State.DELIVERED]
    assert report.unresolved == []
    receipt.set()
    grant = granted(await request)
    assert grant == delivered.grant
    assert isinstance(rig.issuer, CountingIssuer) and rig.issuer.calls == 1


# Blocks mined after the transfer (lookback 4, validBefore 7 s after the rig's clock):
# 8 a second apart leave the newest block before the latest window stamped before
# validBefore (read once); 12 two seconds apart leave it after, and validBefore's block
# is searched for.
@pytest.mark.parametrize(("blocks", "apart"), [(8, 1), (12, 2)], ids=["edge", "search"])
async def test_a_transfer_older_than_the_log_window_is_found_and_delivered(
    own_chain: Devchain, tmp_path: Path, store_backend: str, blocks: int, apart: int
) -> None:
    """The facilitator timed out, its transfer landed, and the seller stayed down while the
    chain moved on past the reader's log window (``log_lookback_blocks``, 10,000 blocks by
    default; 4 here, so that a few blocks move past it). The authorization is used, but its
    ``AuthorizationUsed`` log is older than the window up to the latest block.

    Regression: the record stayed SETTLING for good (the chain "cannot tell"), the buyer
    paid and never got its grant. The transfer landed before the authorization's
    ``validBefore`` (the token refuses it after): once that has passed, the pass looks in
    the window that ends there, or where the first window began if that is earlier, and
    delivers."""
    buyer = own_chain.new_account()
    settler = ScriptedSettler(TIMED_OUT)
    async with open_rig(own_chain, tmp_path, settler=settler, store=store_backend) as rig:
        assert rig.chain is not None
        challenge = await rig.challenge()
        payment = rig.sign(buyer, challenge["accepts"][0], valid_before=int(rig.clock()) + 7)
        problem(await outcome(rig.pay(payment)), 502, "SETTLEMENT_PENDING")
        tx_hash = rig.settle_on_chain(payment)
        rig.chain.log_lookback_blocks = 4
        own_chain.mine_ahead(blocks, seconds_apart=apart)  # past validBefore
        assert own_chain.block_timestamp() >= int(payment.authorization["validBefore"])
        rig.clock.advance(rig.config.reconciler.grace_seconds + 120)  # lease and grace are over

        report = await Reconciler(rig.pipeline, rig.config.reconciler).run_once()

        assert report.unresolved == []
        assert [c.after for c in report.changes] == [State.PAID, State.DELIVERED]
        delivered = await rig.record(challenge["challengeId"])
        assert delivered.state is State.DELIVERED
        assert delivered.tx_hash == tx_hash
