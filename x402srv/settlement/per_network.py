"""Every network's settler, and the one the pipeline calls: by the payment's network.

A payment is settled on the network it was made on (``SettlementRequest.network``),
by that network's settler: a plain settler when the network has one, its
``FailoverSettler`` when it has several. ``NetworkSettlers`` holds them all;
``/readyz`` asks it for each settler's state whatever the config looks like.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from x402srv.config.networks import SettlerSpec
from x402srv.interfaces import (
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
)
from x402srv.settlement.failover import FailoverSettler
from x402srv.settlement.readiness import settler_problem
from x402srv.wire.reasons import Reason

__all__ = ["NetworkSettlers", "NoPrecheck", "Precheck", "precheck_of"]

log = logging.getLogger("x402srv.settlement")

#: A settler's optional ``precheck`` (docs/plugin-reference.md).
Precheck = Callable[[SettlementRequest], Awaitable[SettlementOutcome | None]]


class NoPrecheck(LookupError):
    """The payment's network settler has no ``precheck``: it checks as it settles."""


def precheck_of(settler: object, *, warn: bool = False) -> Precheck | None:
    """``settler``'s ``precheck`` if it has an async one, else None (it has none).

    A plain function there (a plugin's mistake) would only fail once called, after
    the payment was claimed: it is never run, and the settler checks as it settles.
    ``warn``: say so in the log (once, where the settler is put in place).
    """
    precheck = getattr(settler, "precheck", None)
    if precheck is None or inspect.iscoroutinefunction(precheck):
        return precheck
    if warn:
        log.warning(
            "settler %s: its precheck is not an async function; it is not run "
            "(docs/plugin-reference.md)",
            getattr(settler, "name", type(settler).__name__),
        )
    return None


class NetworkSettlers:
    """The settlers of each network (CAIP-2 id -> settler), itself a ``Settler``."""

    name = "per-network"

    def __init__(self, settlers: Mapping[str, Settler], firsts: Mapping[str, SettlerSpec]) -> None:
        self.settlers = dict(settlers)
        self._firsts = dict(firsts)  # each network's first (for a plain settler, only) one
        for settler in self.settlers.values():
            precheck_of(settler, warn=True)

    def only(self) -> Settler | None:
        """The one settler of a one-network seller (the pipeline calls it directly)."""
        return next(iter(self.settlers.values())) if len(self.settlers) == 1 else None

    async def start(self) -> None:
        for settler in self.settlers.values():
            await settler.start()

    async def close(self) -> None:
        for settler in reversed(list(self.settlers.values())):
            with contextlib.suppress(Exception):
                await settler.close()

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        network = request.network.caip2
        settler = self.settlers.get(network)
        if settler is None:  # the pipeline only settles offers it made: a bug, not a payment
            return Rejected(Reason.INVALID_NETWORK, f"nothing settles on {network} here")
        outcome = await settler.settle(request, hooks)
        if isinstance(outcome, Settled) and outcome.by is None and network in self._firsts:
            return Settled(outcome.tx_hash, outcome.payer, self._firsts[network].label)
        return outcome

    async def precheck(self, request: SettlementRequest) -> SettlementOutcome | None:
        """The payment's network settler's ``precheck``; ``NoPrecheck`` when it has none."""
        precheck = precheck_of(self.settlers.get(request.network.caip2))
        if precheck is None:
            raise NoPrecheck(f"no precheck for {request.network.caip2}")
        return await precheck(request)

    async def check_ready(self) -> str | None:
        """None when every network has a settler ready."""
        problem, _ = await self.readiness()
        return problem

    async def readiness(self) -> tuple[str | None, list[dict[str, Any]]]:
        """Whether every network has a settler ready, and every settler's state.

        Each settler's own ``check_ready`` runs once, all of them concurrently.
        """
        per_network = await asyncio.gather(
            *(self._states(network, settler) for network, settler in self.settlers.items())
        )
        failing = [
            _not_ready(network, states, several=len(self.settlers) > 1)
            for network, states in zip(self.settlers, per_network, strict=True)
            if all(state["check"] != "ok" for state in states)
        ]
        return "; ".join(failing) or None, [state for states in per_network for state in states]

    async def _states(self, network: str, settler: Settler) -> list[dict[str, Any]]:
        if isinstance(settler, FailoverSettler):
            return await settler.settler_states()
        problem = await settler_problem(settler)
        return [
            {
                "network": network,
                "settler": first.short_label if (first := self._firsts.get(network)) else "?",
                "check": problem or "ok",
                "breaker": None,  # a network's only settler: nothing to fail over to
            }
        ]


def _not_ready(network: str, states: list[dict[str, Any]], *, several: bool) -> str:
    """Why a network cannot settle: its settler's own words, or each of its settlers'."""
    if len(states) == 1:
        why = str(states[0]["check"])
    else:
        why = "no settler ready: " + "; ".join(f"{s['settler']}: {s['check']}" for s in states)
    return f"{network}: {why}" if several else why
