"""What the operator commands do, without printing (``x402srv.cli.main`` prints).

Each command opens the configured store, chain reader and issuer the way a
server worker would (never the settler: nothing here settles), works through
the same pipeline code, and closes them again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import IO, Any, cast

from x402srv.access.build import build_pipeline
from x402srv.access.given_back import cancel_waits
from x402srv.access.pipeline import AccessPipeline
from x402srv.access.reconciler import PassReport, Reconciler
from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Config
from x402srv.errors import ChallengeExpired, InvalidRequest, NotFound
from x402srv.interfaces import (
    Clock,
    CreditAccount,
    CreditStore,
    MigratingStore,
    Store,
    keeps_credits,
    system_clock,
)
from x402srv.server.registry import Registry
from x402srv.stores.dump import (
    DumpCounts,
    ProgressCallback,
    export_store,
    import_store,
    no_progress,
)
from x402srv.usage.money import amount_text
from x402srv.wire.offers import rfc3339

__all__ = [
    "cancel",
    "credits_shown",
    "displayed",
    "export_records",
    "export_sales",
    "import_records",
    "list_records",
    "migrate",
    "opened",
    "owed_shown",
    "reconcile",
    "redacted",
    "revoke",
    "show",
]


@asynccontextmanager
async def opened(config: Config, *, clock: Clock = system_clock) -> AsyncIterator[AccessPipeline]:
    """The pipeline of ``config`` with its plugins opened (``clock``: tests sweep "later")."""
    built = Registry().build(config, clock=clock)
    await built.store.start()
    try:
        await built.open_chains()
        await built.issuer.start()
        if config.refunds.enabled:  # a reconcile sends the refunds left open
            await built.settlers.start()
        pipeline = build_pipeline(config, built, clock=clock)
        try:
            yield pipeline
        finally:
            # What this command counted (a reconcile settling or delivering, a
            # revocation) reaches the store's counters before it closes.
            await pipeline.counters.stop()
            if config.refunds.enabled:
                await built.settlers.close()
            await built.issuer.close()
            await built.close_chains()
    finally:
        await built.store.close()


async def migrate(config: Config) -> list[str] | None:
    """The store's schema steps applied now; ``None`` when the store has no migrations.

    Never starts the store: ``start`` refuses a schema that is too old, and
    this is the command that makes it current.
    """
    store = Registry().build(config).store
    if not isinstance(store, MigratingStore):
        return None
    return await store.migrate()


async def export_records(
    config: Config,
    out: IO[str],
    *,
    clock: Clock = system_clock,
    progress: ProgressCallback | None = None,
) -> DumpCounts:
    """``x402srv export``: the store's whole content as JSON lines (``x402srv.stores.dump``)."""
    async with _store_of(config, clock) as store:
        return await export_store(store, out, clock=clock, progress=progress or no_progress)


async def import_records(
    config: Config,
    lines: Iterable[str],
    *,
    clock: Clock = system_clock,
    progress: ProgressCallback | None = None,
) -> DumpCounts:
    """``x402srv import``: an export written into this config's (empty) store."""
    async with _store_of(config, clock) as store:
        return await import_store(store, lines, clock=clock, progress=progress or no_progress)


@asynccontextmanager
async def _store_of(config: Config, clock: Clock) -> AsyncIterator[Store]:
    """The store ``config`` names, opened for one command and closed after it."""
    store = Registry().build(config, clock=clock).store
    await store.start()
    try:
        yield store
    finally:
        await store.close()


async def reconcile(
    config: Config, *, grace_seconds: float | None, progress: ProgressCallback | None = None
) -> PassReport | None:
    async with opened(config) as pipeline:
        reconciler = Reconciler(pipeline, config.reconciler, progress=progress)
        return await reconciler.run_exclusive(grace_seconds=grace_seconds, wait_seconds=30)


async def list_records(config: Config, *, state: State | None, limit: int) -> list[ChallengeRecord]:
    async with opened(config) as pipeline:
        return await pipeline.store.list_challenges(states=[state] if state else None, limit=limit)


async def show(config: Config, challenge_id: str) -> dict[str, Any]:
    """A record for display (``displayed``), with its grant's credits when it sells calls.

    A purchase of a plan that sells calls (or limits them) shows its grant's
    account: calls made, credits added, spent, refunded and left, each credit
    (the purchase, every top-up), the recent hourly usage and the recent calls
    charged by use (time, route, reserved, charged). A top-up shows
    the account of the grant it topped up. An OWED record shows what is owed
    to whom (``owed_to_buyer``): what a refund pays back.
    """
    async with opened(config) as pipeline:
        record = await pipeline.store.get_challenge(challenge_id)
        if record is None:
            raise NotFound(f"no challenge {challenge_id}")
        shown = displayed(record, config)
        if record.state is State.OWED:
            shown["owed_to_buyer"] = owed_shown(record, config)
        plan = config.plan_map.get(record.plan_id)
        metered = record.top_up_of is not None or (plan is not None and plan.metered)
        if metered and keeps_credits(pipeline.store):
            grant = record.top_up_of or record.challenge_id
            account = await cast(CreditStore, pipeline.store).get_credits(grant)
            shown["credits"] = credits_shown(grant, account)
    return shown


def owed_shown(record: ChallengeRecord, config: Config) -> dict[str, Any]:
    """What an OWED record owes: the amount paid, to its payer, and why nothing was delivered."""
    why = next((t.reason for t in reversed(record.history) if t.state is State.OWED), None)
    return {
        "amount": record.amount,
        "amount_shown": amount_text(config, record.network, record.asset, record.amount),
        "asset": record.asset,
        "network": record.network,
        "payer": record.payer,
        "tx_hash": record.tx_hash,
        "why": why,
    }


def credits_shown(grant_id: str, account: CreditAccount | None) -> dict[str, Any]:
    """A grant's account as ``challenges show`` prints it."""
    if account is None:
        return {"grant": grant_id, "account": None}
    return {
        "grant": grant_id,
        "calls_made": account.calls,
        "credits_added": account.credited,
        "credits_spent": account.spent,
        "credits_refunded": account.refunded,
        "credits_left": account.balance,
        "rate_window": {"ends": rfc3339(account.window_end), "calls": account.window_calls}
        if account.window_end
        else None,
        "kept_until": rfc3339(account.keep_until),
        "added": [{"key": e.key, "calls": e.amount, "at": rfc3339(e.at)} for e in account.entries],
        "usage_by_hour": [
            {"hour": rfc3339(b.start), "calls": b.calls, "spent": b.spent, "refunded": b.refunded}
            for b in account.usage
        ],
        "calls_charged_by_use": [
            {"at": rfc3339(c.at), "route": c.route, "reserved": c.reserved, "charged": c.charged}
            for c in account.used_calls
        ],
    }


async def cancel(config: Config, challenge_id: str) -> ChallengeRecord:
    """PENDING -> CANCELLED; a later payment for it gets 410 CHALLENGE_EXPIRED."""
    async with opened(config) as pipeline:
        record, now = await pipeline.cancel(challenge_id, "cancelled by operator")
    if now:
        return record
    if record.state is State.PENDING:
        raise InvalidRequest(cancel_waits(record))
    if record.state is State.CANCELLED:
        raise ChallengeExpired(f"challenge {challenge_id} is already cancelled")
    state = record.state.value
    raise InvalidRequest(f"challenge {challenge_id} is {state}; only PENDING can be cancelled")


async def revoke(config: Config, challenge_id: str, reason: str) -> tuple[ChallengeRecord, bool]:
    """Revoke a delivered grant (``x402srv.refunds.running.revoke``); idempotent."""
    from x402srv.refunds.running import revoke as revoke_grant

    async with opened(config) as pipeline:
        return await revoke_grant(pipeline, challenge_id, reason=f"by operator: {reason}")


async def export_sales(config: Config, start: float, end: float) -> list[dict[str, str]]:
    """One row per payment settled in ``[start, end)`` (``x402srv.usage.sales``)."""
    from x402srv.usage.sales import sale_rows

    async with opened(config) as pipeline:
        return await sale_rows(pipeline.store, config, start, end)


def redacted(record: ChallengeRecord) -> dict[str, Any]:
    """A record for display: the bearer token and the payment signature are not shown."""
    data = record.to_dict()
    if data.get("payment"):
        data["payment"]["signature"] = "<redacted>"
    if data.get("grant") and "accessToken" in data["grant"]:
        data["grant"]["accessToken"] = "<redacted>"
    return data


#: The keys of ``ChallengeRecord.to_dict`` (and its payment's) that hold epoch seconds.
_TIMES = ("created_at", "expires_at", "updated_at", "revoked_at")
_PAYMENT_TIMES = ("valid_after", "valid_before", "lease_until")


def displayed(record: ChallengeRecord, config: Config) -> dict[str, Any]:
    """``redacted``, for a person: RFC 3339 times, the amount in token units and USD too.

    ``amount`` stays in atomic units (what the chain moved, as exports and the
    API give it); ``amount_shown`` says it as money (``x402srv.usage.money``).
    """
    data = redacted(record)
    data["amount_shown"] = amount_text(config, record.network, record.asset, record.amount)
    for key in _TIMES:
        if data.get(key) is not None:
            data[key] = rfc3339(data[key])
    for step in data["history"]:
        step["at"] = rfc3339(step["at"])
    if data.get("payment"):
        for key in _PAYMENT_TIMES:
            data["payment"][key] = rfc3339(data["payment"][key])
    return dict(sorted(data.items(), key=lambda item: _ORDER.get(item[0], len(_ORDER))))


#: ``amount_shown`` right after ``amount``; every other key in the record's own order.
_ORDER = {
    key: index
    for index, key in enumerate(
        ("challenge_id", "request_id", "plan_id", "resource_id", "amount", "amount_shown")
    )
}
