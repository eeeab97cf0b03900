"""A network's settlers, tried in order: the next one when one cannot settle.

Built by the registry only for a network with more than one settler
(``[[networks.settlers]]``). For each payment, in the configured order:

    Settled                              -> done; the log and history name the settler
    Rejected, the payment's fault        -> done (another settler would refuse it too)
    Rejected, the settler's fault        -> the next settler at once: refused connection,
    (``settler_failed``)                    an unsupported network, a wallet that cannot send
    "nonce already used"                 -> the chain decides (below): it may be this payment,
                                            settled by a settler we gave up on
    Unknown (timeout, 5xx, dropped)      -> ask the chain: the authorization unused -> the
                                            next settler; used -> settled (by whom, the
                                            chain says) or refused; no answer -> Unknown

Moving on is safe because of the nonce: the token spends an authorization at
most once, so two settlers that both broadcast make one transfer and one
reverted transaction, and the grant names the transfer that happened.

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

from .breaker import BreakerState, CircuitBreaker
from .chain import ChainReader, ChainUnavailable
from .config import BreakerConfig
from .interfaces import (
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Unknown,
)
from .metrics import Metrics
from .metrics import current as current_metrics
from .network_config import SettlerSpec
from .reasons import Reason
from .transfer_call import from_chain

__all__ = ["MIN_ATTEMPT_SECONDS", "FailoverSettler", "Member"]

log = logging.getLogger("x402srv.failover")

#: A settler is not started with less of the lease left than this.
MIN_ATTEMPT_SECONDS = 1.0


@dataclass
class Member:
    """One settler of the network, its place in the list, and its breaker."""

    spec: SettlerSpec
    settler: Settler
    breaker: CircuitBreaker

    @property
    def label(self) -> str:
        return self.spec.label


@dataclass
class _Attempt:
    """What one payment's failover learnt so far."""

    request: SettlementRequest
    hooks: SettlementHooks
    deadline: float
    broadcast: dict[str, str] = field(default_factory=dict)  # txHash -> who broadcast it
    unknown: list[str] = field(default_factory=list)  # who left no outcome (timed out ...)
    last: SettlementOutcome | None = None


class _Watch:
    """The hooks a member gets: the pipeline's, remembering who broadcast what."""

    def __init__(self, attempt: _Attempt, label: str) -> None:
        self._attempt = attempt
        self._label = label

    async def note_broadcast(self, tx_hash: str) -> None:
        self._attempt.broadcast[tx_hash.lower()] = self._label
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
        async def check(member: Member) -> str | None:
            probe = getattr(member.settler, "check_ready", None)
            if not callable(probe):
                return None
            try:
                result: str | None = await asyncio.wait_for(probe(), 3.0)
            except Exception as exc:  # a probe that breaks is a settler that is not ready
                return f"unavailable ({type(exc).__name__})"
            return result

        return list(await asyncio.gather(*(check(m) for m in self.members)))

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
        if isinstance(attempt.last, Unknown):
            return attempt.last
        return Rejected(
            Reason.UNEXPECTED_SETTLE_ERROR,
            f"No settler of {self.network} could settle the payment; nothing was sent.",
            settler_failed=True,
        )

    async def _try(self, member: Member, attempt: _Attempt) -> SettlementOutcome | None:
        """The outcome to answer with, or None to move on to the next settler."""
        left = attempt.deadline - self._monotonic()
        if left < MIN_ATTEMPT_SECONDS:
            log.warning("challenge %s: no time left to try %s", _cid(attempt), member.label)
            return attempt.last or Unknown("the settlement lease ran out")
        try:
            outcome = await asyncio.wait_for(
                member.settler.settle(attempt.request, _Watch(attempt, member.label)), left
            )
        except TimeoutError:
            outcome = Unknown(f"{member.label} did not finish within the lease")
        except Exception:
            # A settler must not raise; one that does may have broadcast: unknown.
            log.exception("challenge %s: %s raised", _cid(attempt), member.label)
            outcome = Unknown(f"{member.label} raised")
        if isinstance(outcome, Settled):
            member.breaker.success()
            return Settled(outcome.tx_hash, outcome.payer, self._who(outcome, member, attempt))
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
        """No outcome, or "already used": the chain says whether to move on."""
        request = attempt.request
        auth = request.authorization
        hint = outcome.tx_hash if isinstance(outcome, Unknown) else None
        if self._chain is None:
            return outcome  # no RPC: nothing tells us the authorization is unused
        try:
            used = await self._chain.authorization_state(
                request.network.asset, auth.payer, auth.nonce
            )
        except ChainUnavailable as exc:
            log.warning("challenge %s: cannot ask the chain: %s", _cid(attempt), exc)
            return outcome
        if not used:
            member.breaker.failure()
            if isinstance(outcome, Unknown) and outcome.tx_hash is None:
                attempt.unknown.append(member.label)
            why = outcome.reason if isinstance(outcome, Unknown) else f"said {outcome.reason}"
            await self._moving_on(member, attempt, outcome, f"{why}; the chain shows it unused")
            return None
        decided = await from_chain(self._chain, request, tx_hint=hint)
        if isinstance(decided, Settled):
            return Settled(decided.tx_hash, decided.payer, self._who(decided, member, attempt))
        return decided

    def _who(self, settled: Settled, member: Member, attempt: _Attempt) -> str:
        """Who moved the money: the settler that broadcast that transaction, if we know it."""
        broadcaster = attempt.broadcast.get(settled.tx_hash.lower())
        if broadcaster is not None:
            return broadcaster
        if settled.by is None and not attempt.unknown:
            return member.label
        if len(attempt.unknown) == 1:
            return f"{attempt.unknown[0]} (after it timed out; shown by the chain)"
        return f"an earlier settlement of this authorization (shown by the chain to {member.label})"

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
