"""A clock the test moves: x402srv takes ``clock=`` wherever time decides something."""

from __future__ import annotations

import time


class MovableClock:
    """Real time plus an offset the test controls."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
