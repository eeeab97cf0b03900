"""A network's settlers, tried in order: the next one when one cannot settle.

Built by the registry only for a network with more than one settler
(``[[networks.settlers]]``). For each payment, in the configured order:

    Settled                              -> done; the log and history name the settler
    Rejected, the payment's fault        -> done (another settler would refuse it too)
    Rejected, the settler's fault        -> the next settler at once: refused connection,
    (``settler_failed``)                    an unsupported network, a wallet that cannot send
    "nonce already used"                 -> the chain decides (below): it may be this payment,
                                            settled by a settler we gave up on
    Unknown (timeout, 5xx, dropped)      -> look at what is in flight first (``in_flight``):
                                            a transaction announced or pending for this
                                            authorization is waited for, never raced; clear
                                            -> the next settler; landed -> settled; spent ->
                                            refused; no answer, or still pending when the
                                            lease ends -> Unknown (the chain decides later)
    every settler failed for its own     -> Rejected with ``settler_failed``: the pipeline
    reason, nothing moved                   answers 503 SETTLER_UNAVAILABLE, the payment is fine

Moving on is safe because of the nonce: the token spends an authorization at
most once. Looking first keeps it cheap: no second settler is asked (and pays
gas for a transaction that reverts) while the first one's transaction is on its
way. The history names the settler whose transaction moved the money, as the
chain shows it (``_who``: the transaction's sender, matched to the addresses
each settler sends from), never a guess from the order they were asked in.

Each settler has a circuit breaker (``breaker``) in this worker process: a
settler that keeps failing is skipped during its cool-down and then probed by
one payment. Skipped settlers are still tried last, when every other one
failed. The whole attempt stays inside the SETTLING lease (``budget``): no
settler is started with less than ``MIN_ATTEMPT_SECONDS`` left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from x402srv.config.models import BreakerConfig
from x402srv.config.networks import SettlerSpec
from x402srv.interfaces import (
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Unknown,
)
from x402srv.server.metrics import Metrics
from x402srv.server.metrics import current as current_metrics
from x402srv.settlement.breaker import BreakerState, CircuitBreaker
from x402srv.settlement.chain import ChainReader
from x402srv.settlement.in_flight import (
    Clear,
    Landed,
    Spent,
    StillPending,
    Unreadable,
    sender_of,
    watch,
)
from x402srv.settlement.readiness import settler_problem
from x402srv.settlement.transfer_call import DETAILS
from x402srv.wire.reasons import Reason

__all__ = ["MIN_ATTEMPT_SECONDS", "FailoverSettler", "Member"]

log = logging.getLogger("x402srv.settlement.failover")

#: A settler is not started with less of the lease left than this.
MIN_ATTEMPT_SECONDS = 1.0
#: How long a settler may take to say which addresses it sends from.
SENDERS_TIMEOUT_SECONDS = 3.0


@dataclass
class Member:
    """One settler of the network, its place in the list, and its breaker."""

    spec: SettlerSpec
    settler: Settler
    breaker: CircuitBreaker

    @property
    def label(self) -> str:
        return self.spec.label

    async def senders(self) -> frozenset[str]:
        """The addresses this settler sends transactions from, if it says (``Settler`` docs)."""
        ask = getattr(self.settler, "senders", None)
        if not callable(ask):
            return frozenset()
        try:
            found = await asyncio.wait_for(ask(), SENDERS_TIMEOUT_SECONDS)
        except Exception:  # a settler that cannot say is one we cannot match: no harm
            return frozenset()
        return frozenset(str(address).lower() for address in found)


@dataclass
class _Attempt:
    """What one payment's failover learnt so far."""

    request: SettlementRequest
    hooks: SettlementHooks
    deadline: float
    broadcast: dict[str, Member] = field(default_factory=dict)  # txHash -> who announced it
    last: SettlementOutcome | None = None
    #: The last settler that left its outcome unknown, even if the chain let us move on.
    unknown: Unknown | None = None


class _Watch:
    """The hooks a member gets: the pipeline's, remembering who broadcast what."""

    def __init__(self, attempt: _Attempt, member: Member) -> None:
        self._attempt = attempt
        self._member = member

    async def note_broadcast(self, tx_hash: str) -> None:
        self._attempt.broadcast[tx_hash.lower()] = self._member
        await self._attempt.hooks.note_broadcast(tx_hash)

    async def note(self, reason: str) -> None:
        await self._attempt.hooks.note(reason)


class FailoverSettler:
    name = "failover"

    def __init__(
        self,
        network: str,
        members: Sequence[tuple[SettlerSpec, Settler]],
        *,
        chain: ChainReader | None,
        breaker: BreakerConfig,
        budget_seconds: float,
        metrics: Metrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.network = network
        self._chain = chain
        self._budget = budget_seconds
        self._metrics = metrics
        self._monotonic = monotonic
        self.members = [
            Member(
                spec,
                settler,
                CircuitBreaker(
                    failures=breaker.failures,
                    cooldown=breaker.cooldown_seconds,
                    probe_timeout=breaker.probe_timeout_seconds,
                    monotonic=monotonic,
                    on_change=self._reporter(spec),
                ),
            )
            for spec, settler in members
        ]

    def _sink(self) -> Metrics:
        return self._metrics or current_metrics()

    def _reporter(self, spec: SettlerSpec) -> Callable[[BreakerState], None]:
        def report(state: BreakerState) -> None:
            log.warning("settler %s: circuit breaker %s", spec.label, state.value)
            self._sink().settler_state(self.network, spec.short_label, state.value)

        return report

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        for member in self.members:
            await member.settler.start()
            state = member.breaker.state.value
            self._sink().settler_state(self.network, member.spec.short_label, state)

    async def close(self) -> None:
        for member in reversed(self.members):
            with contextlib.suppress(Exception):
                await member.settler.close()

    async def check_ready(self) -> str | None:
        """None when at least one settler of the network is ready."""
        problems = await self._checks()
        if any(problem is None for problem in problems):
            return None
        return f"no settler of {self.network} is ready"

    async def _checks(self) -> list[str | None]:
        return list(await asyncio.gather(*(settler_problem(m.settler) for m in self.members)))

    async def settler_states(self) -> list[dict[str, Any]]:
        """Each settler of the network: its check and its breaker (``/readyz``)."""
        problems = await self._checks()
        return [
            {
                "network": self.network,
                "settler": member.spec.short_label,  # public: no host, even redacted
                "check": problem or "ok",
                "breaker": member.breaker.snapshot(),
            }
            for member, problem in zip(self.members, problems, strict=True)
        ]

    # ------------------------------------------------------------ settle

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        attempt = _Attempt(request, hooks, self._monotonic() + self._budget)
        skipped: list[Member] = []
        for member in self.members:
            if not member.breaker.allow():
                skipped.append(member)
                continue
            final = await self._try(member, attempt)
            if final is not None:
                return final
        for member in skipped:  # open breakers: a last resort before giving up
            log.warning(
                "challenge %s: trying %s despite its open breaker", _cid(attempt), member.label
            )
            final = await self._try(member, attempt)
            if final is not None:
                return final
        if attempt.unknown is not None:
            # One of them may still broadcast what it was given: only the chain can say.
            return attempt.unknown
        return Rejected(
            Reason.UNEXPECTED_SETTLE_ERROR,
            f"No settler of {self.network} could settle the payment; nothing was sent.",
            settler_failed=True,  # each failed for its own reason; the payment is fine
        )

    async def _try(self, member: Member, attempt: _Attempt) -> SettlementOutcome | None:
        """The outcome to answer with, or None to move on to the next settler."""
        left = attempt.deadline - self._monotonic()
        if left < MIN_ATTEMPT_SECONDS:
            log.warning("challenge %s: no time left to try %s", _cid(attempt), member.label)
            return attempt.unknown or attempt.last or Unknown("the settlement lease ran out")
        try:
            outcome = await asyncio.wait_for(
                member.settler.settle(attempt.request, _Watch(attempt, member)), left
            )
        except TimeoutError:
            outcome = Unknown(f"{member.label} did not finish within the lease")
        except Exception:
            # A settler must not raise; one that does may have broadcast: unknown.
            log.exception("challenge %s: %s raised", _cid(attempt), member.label)
            outcome = Unknown(f"{member.label} raised")
        if isinstance(outcome, Settled):
            member.breaker.success()
            by = await self._who(outcome.tx_hash, None, attempt, reporter=member)
            return Settled(outcome.tx_hash, outcome.payer, by)
        if isinstance(outcome, Rejected) and outcome.settler_failed:
            member.breaker.failure()
            await self._moving_on(member, attempt, outcome, outcome.reason)
            return None
        if isinstance(outcome, Rejected) and outcome.reason != Reason.NONCE_USED:
            member.breaker.success()  # it answered: the payment is what it refused
            return outcome
        return await self._ask_chain(member, attempt, outcome)

    async def _ask_chain(
        self, member: Member, attempt: _Attempt, outcome: Unknown | Rejected
    ) -> SettlementOutcome | None:
        """No outcome, or "already used": what is in flight decides whether to move on."""
        if self._chain is None:
            return outcome  # no RPC: nothing tells us the authorization is unused
        if isinstance(outcome, Unknown):
            attempt.unknown = outcome
        announced = list(attempt.broadcast)
        if isinstance(outcome, Unknown) and outcome.tx_hash:
            announced.append(outcome.tx_hash)
        why = outcome.reason if isinstance(outcome, Unknown) else f"said {outcome.reason}"

        async def waiting(what: str) -> None:
            log.info("challenge %s: %s; waiting for it", _cid(attempt), what)
            with contextlib.suppress(Exception):  # a history line is worth no failed payment
                await attempt.hooks.note(
                    f"{member.label} left the outcome unknown ({why}); {what}: waiting for it "
                    "before asking another settler"
                )

        seen = await watch(
            self._chain,
            attempt.request,
            announced,
            deadline=attempt.deadline,
            monotonic=self._monotonic,
            on_pending=waiting,
        )
        if isinstance(seen, Clear):
            member.breaker.failure()
            await self._moving_on(member, attempt, outcome, f"{why}; the chain shows it unused")
            return None
        if isinstance(seen, Landed):
            by = await self._who(seen.tx_hash, seen.sender, attempt, reporter=None)
            return Settled(seen.tx_hash, attempt.request.authorization.payer, by)
        if isinstance(seen, Spent):
            log.info("challenge %s: authorization used elsewhere (%s)", _cid(attempt), seen.why)
            return Rejected(Reason.NONCE_USED, DETAILS[Reason.NONCE_USED])
        if isinstance(seen, StillPending):
            log.warning("challenge %s: still in flight (%s)", _cid(attempt), seen.why)
            hint = announced[-1] if announced else None
            return Unknown(f"{seen.why} when the settlement lease ran out", hint)
        assert isinstance(seen, Unreadable)
        log.warning("challenge %s: cannot ask the chain: %s", _cid(attempt), seen.why)
        return outcome

    async def _who(
        self, tx_hash: str, sender: str | None, attempt: _Attempt, *, reporter: Member | None
    ) -> str:
        """Who moved the money: the settler that sent ``tx_hash``, as the chain shows it.

        The sender's address is matched to the addresses each settler sends from
        (``Settler.senders``); the settler that announced the transaction or
        reported it is only believed when the chain cannot say, or when that
        settler does not tell its addresses.
        """
        tx_hash = tx_hash.lower()
        announcer = attempt.broadcast.get(tx_hash) or reporter
        if sender is None and self._chain is not None:
            sender = await sender_of(self._chain, tx_hash)
        if sender is None:
            if announcer is not None:
                return announcer.label
            return "an earlier settlement of this authorization (shown by the chain)"
        # The announcer first: it is the sender nearly always, and a match ends the search
        # (a settler that is down is asked for its addresses only when it matters).
        ordered = [announcer] if announcer is not None else []
        ordered += [m for m in self.members if m is not announcer]
        for member in ordered:
            if sender in await member.senders():
                return member.label
        if announcer is not None and not await announcer.senders():
            return announcer.label  # it does not say where it sends from: its word stands
        return f"{sender}, none of the settlers of {self.network} (shown by the chain)"

    async def _moving_on(
        self, member: Member, attempt: _Attempt, outcome: SettlementOutcome, why: str
    ) -> None:
        attempt.last = outcome
        log.warning("challenge %s: %s could not settle (%s)", _cid(attempt), member.label, why)
        self._sink().failover(self.network, member.spec.short_label)
        with contextlib.suppress(Exception):  # a history line is worth no failed payment
            await attempt.hooks.note(f"{member.label} could not settle ({why}); trying the next")


def _cid(attempt: _Attempt) -> str:
    return attempt.request.challenge_id
