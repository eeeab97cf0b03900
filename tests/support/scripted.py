"""Settlers and issuers whose behaviour the test scripts: what cannot be made real on cue.

A real facilitator cannot be told to time out, raise, hang or answer "rejected"
at one exact moment; ``ScriptedSettler`` can. Where the chain must agree with
what the settler says, its ``OnChain`` step really settles the authorization on
anvil first, as the facilitator would have, so every chain read the pipeline
makes afterwards is real.

``CountingIssuer`` and ``GatedCallback`` count credential issuance; the second
is a seller function for the real ``callback`` issuer (the exclusive one) that
waits until the test lets it answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from eth_account.signers.local import LocalAccount

from x402srv.devchain import Devchain, settle_batch, settle_on_chain
from x402srv.interfaces import (
    Authorization,
    Clock,
    GrantRequest,
    IssuedCredential,
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Unknown,
)

__all__ = [
    "HANG",
    "Batching",
    "CountingIssuer",
    "GatedCallback",
    "OnChain",
    "ScriptedSettler",
    "Step",
    "rejected_after",
    "unknown_after",
    "wire",
]


class _Hang:
    """Never answers; only cancellation (the pipeline's lease budget) ends it."""

    def __repr__(self) -> str:
        return "HANG"


HANG: Final = _Hang()

Script = Callable[[SettlementRequest, SettlementHooks], Awaitable[SettlementOutcome]]
#: An outcome to return, an exception to raise, HANG, or a coroutine function to run.
Step = Settled | Rejected | Unknown | BaseException | _Hang | Script


def wire(auth: Authorization) -> dict[str, str]:
    """The x402 wire form of an authorization the pipeline checked."""
    return {
        "from": auth.payer,
        "to": auth.to,
        "value": str(auth.value),
        "validAfter": str(auth.valid_after),
        "validBefore": str(auth.valid_before),
        "nonce": auth.nonce,
    }


class ScriptedSettler:
    """Takes the next step of its script on every ``settle`` call."""

    name = "scripted"

    def __init__(self, *script: Step) -> None:
        self.script = list(script)
        self.requests: list[SettlementRequest] = []
        self.cancelled = 0
        self.overrun = False

    def then(self, *steps: Step) -> None:
        self.script.extend(steps)

    async def start(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        self.requests.append(request)
        if not self.script:
            self.overrun = True  # the pipeline would turn the raise into Unknown; tests check this
            raise AssertionError("the settler was called more often than scripted")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, _Hang):
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if isinstance(step, Settled | Rejected | Unknown):
            return step
        assert not isinstance(step, _Hang)
        return await step(request, hooks)


def unknown_after(tx_hash: str, payer: str) -> SettlementOutcome:
    """What a facilitator that timed out after broadcasting says."""
    return Unknown("facilitator timed out", tx_hash)


def rejected_after(tx_hash: str, payer: str) -> SettlementOutcome:
    """A facilitator that says "invalid" although its transfer went through."""
    return Rejected("unexpected_settle_error", "The facilitator refused the payment.")


@dataclass
class OnChain:
    """A step that really settles the request's authorization on anvil, then answers.

    It notes the broadcast (``hooks.note_broadcast``), sets ``broadcast``, waits
    for ``gate`` if one is given (a receipt that takes its time), and answers
    ``answer(tx_hash, payer)``: ``Settled`` unless told otherwise.
    """

    devchain: Devchain
    relayer: LocalAccount
    answer: Callable[[str, str], SettlementOutcome] = Settled
    gate: asyncio.Event | None = None
    broadcast: asyncio.Event = field(default_factory=asyncio.Event)
    tx_hash: str | None = None

    async def __call__(
        self, request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        auth = request.authorization
        self.tx_hash = settle_on_chain(self.devchain, self.relayer, wire(auth), auth.signature)
        await hooks.note_broadcast(self.tx_hash)
        self.broadcast.set()
        if self.gate is not None:
            await self.gate.wait()
        return self.answer(self.tx_hash, auth.payer)


class Batching:
    """A batching facilitator: holds ``size`` settle calls, settles them in ONE transaction.

    Use the same object as several steps of a script; each call waits until the
    batch is full, then every caller answers ``answer(batch_tx, its payer)``.
    """

    def __init__(
        self,
        devchain: Devchain,
        relayer: LocalAccount,
        contract: str,
        *,
        size: int = 2,
        answer: Callable[[str, str], SettlementOutcome] = Settled,
    ) -> None:
        self.devchain, self.relayer, self.contract = devchain, relayer, contract
        self.size = size
        self.answer = answer
        self.tx_hash: str | None = None
        self._waiting: list[tuple[Authorization, asyncio.Future[str]]] = []

    async def __call__(
        self, request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        settled = asyncio.get_running_loop().create_future()
        self._waiting.append((request.authorization, settled))
        if len(self._waiting) == self.size:
            batch = [(wire(auth), auth.signature) for auth, _ in self._waiting]
            self.tx_hash = settle_batch(self.devchain, self.relayer, self.contract, batch)
            for _, waiter in self._waiting:
                waiter.set_result(self.tx_hash)
        tx_hash = await settled
        await hooks.note_broadcast(tx_hash)
        return self.answer(tx_hash, request.authorization.payer)


class CountingIssuer:
    """Opaque tokens ``<label>-<n>``, counted; may fail its first ``fail`` calls.

    Not exclusive by default, like ``jwt``: the pipeline takes no delivery
    claim, so two requests may both issue and one grant is stored.
    """

    name = "counting"

    def __init__(self, clock: Clock, *, label: str = "token", fail: int = 0) -> None:
        self.clock = clock
        self.label = label
        self.fail = fail
        self.exclusive = False
        self.requests: list[GrantRequest] = []
        self.tokens: list[str] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    async def start(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""

    def jwks(self) -> dict[str, Any] | None:
        return None

    async def issue(self, request: GrantRequest) -> IssuedCredential:
        self.requests.append(request)
        if self.fail:
            self.fail -= 1
            raise RuntimeError("issuer unavailable")
        token = f"{self.label}-{len(self.tokens) + 1}"
        self.tokens.append(token)
        return IssuedCredential(token, "Bearer", self.clock() + request.token_ttl_seconds)


class GatedCallback:
    """A seller's ``fetch_resource_credentials`` that counts calls and answers when released."""

    def __init__(self, *, released: bool = False) -> None:
        self.calls: list[dict[str, str]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        if released:
            self.release.set()

    async def __call__(self, request: dict[str, str]) -> dict[str, str]:
        self.calls.append(request)
        self.entered.set()
        await self.release.wait()
        return {"token": f"seller-token-{len(self.calls)}"}
