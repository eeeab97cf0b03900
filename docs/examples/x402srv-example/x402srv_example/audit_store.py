"""Store ``audit``: another store, plus an append-only audit file.

Every applied change of a challenge becomes one JSON line (time, challenge,
from, to, reason, txHash) for bookkeeping outside x402srv. Everything else is
the wrapped store's: ``DelegatingStore`` hands every call on, and this wrapper
adds no atomicity of its own, so it keeps every guarantee of the store it wraps
(the store contract suite runs over it).

A line is appended after its change is committed, so after a crash the store,
not the file, is the truth; and a line that cannot be written is logged, never
raised, because the change it describes has already happened.

``wraps`` names the wrapped store as the TOML's ``[store] backend`` would
(``sqlite``, ``redis``, ``postgres``, ...); ``PluginContext.build_store`` builds
it, checked like any store.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import Field

from x402srv.plugin import (
    ChallengeRecord,
    DelegatingStore,
    PaymentClaimed,
    PaymentKey,
    PluginContext,
    PluginOptions,
    Register,
    State,
    Store,
    TransitionApplied,
    TransitionRequest,
    TransitionResult,
    hookimpl,
)

__all__ = ["AuditOptions", "AuditStore", "build_audit_store", "register_stores"]

log = logging.getLogger("x402srv_example.audit")


class AuditOptions(PluginOptions):
    """``[store.audit]``"""

    #: The audit file, relative to the config file.
    log: str = "audit.jsonl"
    #: The registered store to wrap (a ``[store] backend`` name), built from the same config.
    wraps: str = Field(min_length=1)
    #: The wrapped store's own options (its ``[store.<name>]`` table when it stands alone).
    wrapped: dict[str, Any] = Field(default_factory=dict)


class AuditStore(DelegatingStore):
    """Hands everything to ``inner``; notes each applied create and transition."""

    def __init__(self, inner: Store, log_path: Path) -> None:
        super().__init__(inner, name="audit")
        self.log_path = log_path

    async def create_challenge(
        self, record: ChallengeRecord, *, claim_payment: PaymentKey | None = None
    ) -> tuple[ChallengeRecord, bool] | PaymentClaimed:
        result = await super().create_challenge(record, claim_payment=claim_payment)
        if isinstance(result, tuple) and result[1]:  # created now, not an existing requestId
            await self._append(result[0], None, "created")
        return result

    async def transition(self, request: TransitionRequest) -> TransitionResult:
        result = await super().transition(request)
        if isinstance(result, TransitionApplied):  # a lost compare-and-set changed nothing
            await self._append(result.record, request.expect, request.reason)
        return result

    async def _append(self, record: ChallengeRecord, before: State | None, reason: str) -> None:
        line = {
            "at": record.updated_at,
            "challengeId": record.challenge_id,
            "from": before,
            "to": record.state,
            "reason": reason,
            "txHash": record.tx_hash,
        }
        try:  # a thread, so a slow disk never stalls the event loop
            await asyncio.to_thread(self._write, json.dumps(line) + "\n")
        except OSError as exc:
            log.error("audit line for %s not written (%s)", record.challenge_id, exc.strerror)

    def _write(self, line: str) -> None:
        # One write per line on a file opened for appending: concurrent lines never mix.
        with self.log_path.open("a", encoding="utf-8") as out:
            out.write(line)


def build_audit_store(ctx: PluginContext) -> AuditStore:
    """The factory ``[store] backend = "audit"`` selects; opens nothing (``check`` runs it)."""
    options = ctx.parse_options(AuditOptions)
    # Errors in the wrapped store's options name the table they come from.
    inner = ctx.build_store(options.wraps, options.wrapped, key_path=f"{ctx.key_path}.wrapped")
    return AuditStore(inner, ctx.config.base_dir / options.log)


@hookimpl
def register_stores(register: Register[Store]) -> None:
    register("audit", build_audit_store)
