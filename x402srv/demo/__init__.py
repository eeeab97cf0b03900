"""``x402srv demo``: a whole purchase on a local chain, in one command, explained as it runs.

It starts anvil (installed with npm on first use, into a per-user cache), deploys
our EIP-3009 token, funds a buyer, starts a seller (an x402srv process with gas-wallet
settlement and sqlite, plus the seller's own API with ``GET /weather`` behind
``x402srv.guard.require_access``), buys a plan with the official ``x402`` client,
calls the API with the token, and stops everything it started (by PID).

Why a separate API process instead of a gateway route: it is the shape the README
teaches first (keep your API, add the guard, built from the same seller.toml), it
shows the grant and the token as separate steps a seller must understand, and it
needs no more processes than a gateway with its upstream would.

Modules: ``accounts`` (who is who), ``stack`` (processes), ``seller_api`` (the
guarded app), ``buyer`` (the official client, recorded), ``steps`` (what is shown),
``show`` (formatting), ``keep`` (``--keep`` instructions), ``run`` (lifecycle).
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["run_demo"]


def run_demo(*, keep: bool = False) -> int:
    """Run the demo; exit code 2 when the ``demo`` extra (the x402 SDK) is missing."""
    if importlib.util.find_spec("x402") is None:
        print(
            "x402srv demo: the buyer side needs the official x402 SDK: "
            "pip install 'x402srv[demo]' (./run serve installs it)",
            file=sys.stderr,
        )
        return 2
    if importlib.util.find_spec("x402srv_gaswallet") is None:
        print(
            "x402srv demo: the seller settles with the gas-wallet plugin, which the demo "
            "extra installs: pip install 'x402srv[demo]' (./run serve installs it)",
            file=sys.stderr,
        )
        return 2
    from x402srv.demo.run import run

    return run(keep=keep)
