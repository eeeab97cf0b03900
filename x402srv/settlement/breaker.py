"""A circuit breaker for one settler of a network's failover, in one worker process.

    closed ──(``failures`` definite failures in a row)──► open
      ▲                                                     │ cool-down over
      └──── the probe succeeds ◄── half-open (one probe) ◄──┘
                                         │ the probe fails
                                         └──────────────► open (a new cool-down)

Closed: every payment may use the settler. Open: the failover skips it (it is
still tried last, when every other settler failed: a seller never stops
selling because all breakers opened). Half-open: the first payment to ask gets
the one probe slot; the others skip the settler until the probe reports. A
probe that never reports (its request was cancelled) frees the slot after
``probe_timeout`` seconds.

Only failures of the settler count: a payment it refuses (bad signature, no
funds) is an answer, so it closes the breaker like a success. The clock is
injected (``monotonic``): tests turn it instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum

__all__ = ["BreakerState", "CircuitBreaker"]


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    def __init__(
        self,
        *,
        failures: int,
        cooldown: float,
        probe_timeout: float,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self.probe_timeout = probe_timeout
        self._monotonic = monotonic
        self._on_change = on_change
        self.failures = 0  # definite failures in a row
        self._opened_at: float | None = None
        self._probe_since: float | None = None
        self._last = BreakerState.CLOSED

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._monotonic() - self._opened_at < self.cooldown:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def allow(self) -> bool:
        """May this payment use the settler now? In half-open, True takes the probe slot."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.OPEN:
            return False
        now = self._monotonic()
        if self._probe_since is not None and now - self._probe_since < self.probe_timeout:
            return False  # a probe is out; the others wait for its report
        self._probe_since = now
        self._changed()
        return True

    def success(self) -> None:
        """The settler settled, or answered about the payment: it works."""
        self.failures = 0
        self._opened_at = self._probe_since = None
        self._changed()

    def failure(self) -> None:
        """The settler could not settle (unreachable, 5xx, unsupported, no outcome)."""
        self.failures += 1
        if self._probe_since is not None or self.failures >= self.threshold:
            if self._opened_at is None or self.state is not BreakerState.OPEN:
                self._opened_at = self._monotonic()  # (re)open: a new cool-down
            self._probe_since = None
        self._changed()

    def _changed(self) -> None:
        state = self.state
        if state is not self._last:
            self._last = state
            if self._on_change is not None:
                self._on_change(state)

    def snapshot(self) -> dict[str, object]:
        """What ``/readyz`` shows: the state and the failures in a row."""
        return {"state": self.state.value, "failures": self.failures}
