"""The circuit breaker of a failover settler, and the failover's use of it, on a turned clock.

The clock is injected (``monotonic``): cool-downs and probe timeouts pass by
turning it, never by sleeping. Settlers are scripted (a facilitator cannot be
told to refuse on cue); without a chain reader, an unknown outcome is never
passed on (nothing could show the authorization unused).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.configs import make_config
from tests.support.scripted import ScriptedSettler
from x402srv.config.models import BreakerConfig, SettlerConfig, SettlerSpec
from x402srv.interfaces import Rejected, Settled, SettlementRequest, Unknown
from x402srv.server.metrics import Metrics
from x402srv.settlement.breaker import BreakerState, CircuitBreaker
from x402srv.settlement.failover import FailoverSettler
from x402srv.testing.buyers import settlement_request
from x402srv.wire.reasons import Reason

NETWORK = "eip155:84532"
TX = "0x" + "cd" * 32
REFUSED = Rejected(Reason.UNEXPECTED_SETTLE_ERROR, "could not be reached", settler_failed=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def breaker(clock: Clock, *, failures: int = 3) -> CircuitBreaker:
    return CircuitBreaker(failures=failures, cooldown=30.0, probe_timeout=60.0, monotonic=clock)


# ---------------------------------------------------------------- the breaker


def test_it_opens_after_the_failures_in_a_row_and_a_success_resets_the_count() -> None:
    clock = Clock()
    cb = breaker(clock)
    cb.failure()
    cb.failure()
    cb.success()
    cb.failure()
    cb.failure()
    assert (cb.state, cb.allow()) == (BreakerState.CLOSED, True)
    cb.failure()
    assert (cb.state, cb.allow()) == (BreakerState.OPEN, False)


def test_after_the_cool_down_one_probe_and_only_one() -> None:
    clock = Clock()
    cb = breaker(clock, failures=1)
    cb.failure()
    clock.now += 29.9
    assert not cb.allow()
    clock.now += 0.1
    assert cb.state is BreakerState.HALF_OPEN
    assert cb.allow(), "the first payment gets the probe"
    assert not cb.allow(), "the others skip it while the probe is out"
    cb.success()
    assert (cb.state, cb.allow(), cb.allow()) == (BreakerState.CLOSED, True, True)


def test_a_failed_probe_opens_it_for_a_new_cool_down() -> None:
    clock = Clock()
    cb = breaker(clock, failures=1)
    cb.failure()
    clock.now += 30
    assert cb.allow()
    cb.failure()
    assert cb.state is BreakerState.OPEN
    clock.now += 29
    assert not cb.allow()
    clock.now += 1
    assert cb.allow()


def test_a_probe_that_never_reports_frees_its_slot_after_the_probe_timeout() -> None:
    clock = Clock()
    cb = breaker(clock, failures=1)
    cb.failure()
    clock.now += 30
    assert cb.allow()  # ... and its request is cancelled: no success, no failure
    clock.now += 59
    assert not cb.allow()
    clock.now += 1
    assert cb.allow(), "another payment probes"


def test_changes_are_reported() -> None:
    clock = Clock()
    seen: list[BreakerState] = []
    cb = CircuitBreaker(
        failures=1, cooldown=5, probe_timeout=5, monotonic=clock, on_change=seen.append
    )
    cb.failure()
    clock.now += 5
    cb.allow()
    cb.success()
    assert seen == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]
    assert cb.snapshot() == {"state": "closed", "failures": 0}


# ---------------------------------------------------------------- the failover


class Seen(Metrics):
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.failovers: list[str] = []

    def settler_state(self, network: str, settler: str, state: str) -> None:
        self.states.append((settler, state))

    def failover(self, network: str, settler: str) -> None:
        self.failovers.append(settler)


class Hooks:
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.broadcast: list[str] = []

    async def note_broadcast(self, tx_hash: str) -> None:
        self.broadcast.append(tx_hash)

    async def note(self, reason: str) -> None:
        self.notes.append(reason)


def spec(position: int, count: int) -> SettlerSpec:
    label = f"facilitator http://f{position}.example #{position} on {NETWORK}"
    config = SettlerConfig(facilitator_url=f"http://f{position}.example")  # type: ignore[arg-type]
    return SettlerSpec(
        NETWORK, position, count, f"networks[0].settlers[{position - 1}]", config, label
    )


def failover(
    *settlers: ScriptedSettler, clock: Clock, metrics: Metrics | None = None
) -> FailoverSettler:
    return FailoverSettler(
        NETWORK,
        [(spec(n, len(settlers)), s) for n, s in enumerate(settlers, start=1)],
        chain=None,
        breaker=BreakerConfig(failures=2, cooldown_seconds=30, probe_timeout_seconds=60),
        budget_seconds=100,
        metrics=metrics,
        monotonic=clock,
    )


def request() -> SettlementRequest:
    config = make_config()
    auth: dict[str, Any] = {
        "from": "0x" + "11" * 20,
        "to": config.seller.wallet_address,
        "value": "100000",
        "validAfter": "0",
        "validBefore": "2000000000",
        "nonce": "0x" + "22" * 32,
    }
    return settlement_request(config, "0x" + "33" * 65, auth)


async def test_a_definite_refusal_moves_to_the_next_settler_at_once() -> None:
    first, second = ScriptedSettler(REFUSED), ScriptedSettler(Settled(TX, "0xpayer"))
    metrics, hooks = Seen(), Hooks()
    settler = failover(first, second, clock=Clock(), metrics=metrics)
    outcome = await settler.settle(request(), hooks)
    assert outcome == Settled(TX, "0xpayer", f"facilitator http://f2.example #2 on {NETWORK}")
    assert (len(first.requests), len(second.requests)) == (1, 1)
    assert hooks.notes == [
        f"facilitator http://f1.example #1 on {NETWORK} could not settle "
        "(unexpected_settle_error); trying the next"
    ]
    assert metrics.failovers == [f"facilitator #1 on {NETWORK}"]


async def test_a_payment_the_settler_refuses_is_answered_not_passed_on() -> None:
    refused = Rejected(Reason.INSUFFICIENT_BALANCE, "no funds")
    first, second = ScriptedSettler(refused), ScriptedSettler()
    settler = failover(first, second, clock=Clock())
    assert await settler.settle(request(), Hooks()) == refused
    assert second.requests == []
    assert settler.members[0].breaker.failures == 0, "an answer is no failure"


async def test_without_a_chain_an_unknown_outcome_is_never_passed_on() -> None:
    first, second = ScriptedSettler(Unknown("read timeout")), ScriptedSettler()
    settler = failover(first, second, clock=Clock())
    assert await settler.settle(request(), Hooks()) == Unknown("read timeout")
    assert second.requests == []


async def test_every_settler_refusing_is_a_definite_refusal() -> None:
    settler = failover(ScriptedSettler(REFUSED), ScriptedSettler(REFUSED), clock=Clock())
    outcome = await settler.settle(request(), Hooks())
    assert isinstance(outcome, Rejected)
    assert outcome.settler_failed
    assert outcome.reason == Reason.UNEXPECTED_SETTLE_ERROR


async def test_an_open_breaker_skips_its_settler_until_the_probe_then_closes() -> None:
    clock, metrics = Clock(), Seen()
    first = ScriptedSettler(REFUSED, REFUSED)
    second = ScriptedSettler(*[Settled(TX, "0xpayer")] * 4)
    settler = failover(first, second, clock=clock, metrics=metrics)
    for _ in range(2):
        await settler.settle(request(), Hooks())
    assert settler.members[0].breaker.state is BreakerState.OPEN
    await settler.settle(request(), Hooks())
    assert len(first.requests) == 2, "skipped while open"
    clock.now += 30
    first.then(Settled(TX, "0xpayer"))
    outcome = await settler.settle(request(), Hooks())
    assert isinstance(outcome, Settled)
    assert outcome.by == f"facilitator http://f1.example #1 on {NETWORK}", "the probe settled"
    assert settler.members[0].breaker.snapshot()["state"] == "closed"
    assert (f"facilitator #1 on {NETWORK}", "open") in metrics.states
    assert metrics.states[-1] == (f"facilitator #1 on {NETWORK}", "closed")
    states = await settler.settler_states()
    assert [s["breaker"]["state"] for s in states] == ["closed", "closed"]


async def test_open_breakers_are_still_tried_last_when_everything_else_fails() -> None:
    clock = Clock()
    first = ScriptedSettler(REFUSED, REFUSED, Settled(TX, "0xpayer"))
    second = ScriptedSettler(Settled(TX, "0xpayer"), Settled(TX, "0xpayer"), REFUSED)
    settler = failover(first, second, clock=clock)
    for _ in range(2):
        await settler.settle(request(), Hooks())
    assert settler.members[0].breaker.state is BreakerState.OPEN
    outcome = await settler.settle(request(), Hooks())  # #2 refuses: #1, open, is the last try
    assert isinstance(outcome, Settled)
    assert len(first.requests) == 3


@pytest.mark.parametrize("raised", [RuntimeError("boom"), ValueError("bad")])
async def test_a_settler_that_raises_is_an_unknown_outcome(raised: Exception) -> None:
    settler = failover(ScriptedSettler(raised), ScriptedSettler(), clock=Clock())
    outcome = await settler.settle(request(), Hooks())
    assert isinstance(outcome, Unknown)
