"""Crash-injection points for tests: SIGKILL this process at a named boundary.

Disabled unless ``X402SRV_FAILPOINT`` names a point when the process starts;
then ``failpoint(name)`` at that boundary kills the process on the spot, the
way a power cut or an OOM kill would (no cleanup, no finally blocks). In
production the call is one comparison against ``None``.

Points (in the order a settlement reaches them):

    after-claim       the payment is claimed and the challenge SETTLING, nothing handed over
    after-broadcast   the gas wallet's transaction is sent, its receipt not awaited
    after-paid        the challenge is PAID, no credential issued yet
    after-grant       the credential is issued, the challenge not yet DELIVERED
    after-credit      (plans that sell calls) the grant is credited, the challenge not yet
                      DELIVERED: a retry credits with the same key, which changes nothing
"""

from __future__ import annotations

import os
import signal

__all__ = ["CREDIT_POINTS", "POINTS", "failpoint"]

POINTS = ("after-claim", "after-broadcast", "after-paid", "after-grant")
#: Reached only by purchases and top-ups of plans that sell calls.
CREDIT_POINTS = ("after-credit",)


def failpoint(name: str) -> None:
    # (read at each call, not at import: a test process forked from an interpreter that
    # imported this module already, x402srv.testing.zygote, has its own environment)
    if name == os.environ.get("X402SRV_FAILPOINT"):
        os.kill(os.getpid(), signal.SIGKILL)
