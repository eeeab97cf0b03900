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


def until_clear_of_a_window_end(window: float, needed: float = 60.0) -> float:
    """Seconds to wait so that a fixed window of ``window`` s has ``needed`` s left.

    The unpaid-request limit counts in fixed windows, multiples of ``window_seconds``
    since the epoch (``x402srv.usage.unpaid_limit``): however long, one ends now and
    then (a day's at midnight UTC), and the requests after it are counted afresh. A
    test that expects the limit to refuse waits this long (usually 0) before its first
    counted request, and its counted requests take less than ``needed``.
    """
    left = window - time.time() % window
    return 0.0 if left >= needed else left + 0.1
