"""The decisions every built-in store makes on a grant's credits inside its atomic step.

As ``rules`` does for challenge records: the memory and sqlite stores
load the account, decide here, and write the result in the same atomic step
(a lock, a ``BEGIN IMMEDIATE`` transaction), so the two cannot drift apart.
The redis plugin repeats these rules in Lua (``x402srv_redis.scripts``), with
the window and hour boundaries computed here by the caller; the store contract
(``x402srv.testing.store_contract_credits``) pins them for every store.

Rules, in the order a spend applies them:

1. An account whose ``keep_until`` is before ``now`` is absent.
2. Rate: the window of ``now`` is ``[end - seconds, end)`` with ``end`` a
   multiple of ``seconds``; a window other than the stored one counts from 0.
   Full (``window_calls >= limit``): THROTTLED, nothing changes.
3. Credits: an absent account or a balance below the cost: NO_CREDITS,
   nothing changes.
4. SPENT: the balance drops by the cost, ``spent`` grows by it, ``calls`` and
   the window count by one, and the hour's usage bucket records both.

A call charged by use then settles (``apply_settle``): the unused part of its
reservation comes back as a refund, and the call joins ``used_calls`` (the
newest ``USED_CALLS``: a grant's recent calls, for the operator, not a ledger).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from x402srv.interfaces import (
    CreditAccount,
    Credited,
    CreditEntry,
    RateWindow,
    Spend,
    SpendOutcome,
    UsageBucket,
    UsedCall,
)

__all__ = [
    "USAGE_BUCKETS",
    "USAGE_BUCKET_SECONDS",
    "USED_CALLS",
    "apply_credit",
    "apply_refund",
    "apply_settle",
    "apply_spend",
    "bucket_start",
    "check_used_call",
    "decode_account",
    "encode_account",
    "live",
    "window_end",
]

#: A grant's usage history: calls and credits per hour, the most recent hours only.
USAGE_BUCKET_SECONDS = 3600
USAGE_BUCKETS = 48
#: Calls charged by use kept per grant (newest first): what ``challenges show`` lists.
USED_CALLS = 100
#: The longest route or tool name a used call records.
USED_CALL_ROUTE = 200


def window_end(now: float, seconds: int) -> int:
    """The end of the rate window ``now`` falls in (windows start at multiples of ``seconds``)."""
    return (math.floor(now / seconds) + 1) * seconds


def bucket_start(now: float) -> int:
    return math.floor(now / USAGE_BUCKET_SECONDS) * USAGE_BUCKET_SECONDS


def live(account: CreditAccount | None, now: float) -> CreditAccount | None:
    """Rule 1: past ``keep_until`` an account is gone, whether or not it was deleted yet."""
    if account is None or account.keep_until < now:
        return None
    return account


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def _empty(grant_id: str, keep_until: float) -> CreditAccount:
    return CreditAccount(grant_id, 0, 0, 0, 0, 0, 0, 0, keep_until)


def apply_credit(
    account: CreditAccount | None,
    grant_id: str,
    amount: int,
    *,
    key: str,
    now: float,
    keep_until: float,
    credited_before: bool,
) -> tuple[CreditAccount | None, Credited]:
    """The account after crediting (None: nothing to write) and the answer.

    ``credited_before`` says whether the store already holds ``key`` for this
    (live) account; a durable store keeps the keys beside the account.
    """
    _positive("amount", amount)
    account = live(account, now)
    if account is not None and credited_before:
        return None, Credited(account.balance, applied=False)
    base = account or _empty(grant_id, keep_until)
    updated = replace(
        base,
        balance=base.balance + amount,
        credited=base.credited + amount,
        keep_until=max(base.keep_until, keep_until),
        entries=(*base.entries, CreditEntry(key, amount, now)),
    )
    return updated, Credited(updated.balance, applied=True)


def apply_spend(
    account: CreditAccount | None,
    grant_id: str,
    cost: int,
    *,
    now: float,
    keep_until: float,
    rate: RateWindow | None,
    credits: bool,
) -> tuple[CreditAccount | None, Spend]:
    """The account after one call (None: nothing to write) and the answer (rules 1-4)."""
    _positive("cost", cost)
    account = live(account, now)
    end, counted = 0, 0
    if rate is not None:
        _positive("rate.limit", rate.limit)
        _positive("rate.seconds", rate.seconds)
        end = window_end(now, rate.seconds)
        if account is not None and account.window_end == end:
            counted = account.window_calls
        if counted >= rate.limit:
            balance = account.balance if account is not None and credits else None
            return None, Spend(SpendOutcome.THROTTLED, balance, counted, end)
    if credits and (account is None or account.balance < cost):
        balance = 0 if account is None else account.balance
        return None, Spend(SpendOutcome.NO_CREDITS, balance, counted, end)
    base = account or _empty(grant_id, keep_until)
    taken = cost if credits else 0
    updated = replace(
        base,
        balance=base.balance - taken,
        spent=base.spent + taken,
        calls=base.calls + 1,
        window_end=end,
        window_calls=counted + 1 if rate is not None else 0,
        keep_until=max(base.keep_until, keep_until),
        usage=_used(base.usage, now, calls=1, spent=taken, refunded=0),
    )
    balance = updated.balance if credits else None
    return updated, Spend(SpendOutcome.SPENT, balance, updated.window_calls, end)


def apply_refund(
    account: CreditAccount | None, amount: int, *, now: float
) -> tuple[CreditAccount | None, int | None]:
    """The account after giving back ``amount`` (None: absent, nothing to write) and its balance."""
    _positive("amount", amount)
    account = live(account, now)
    if account is None:
        return None, None
    updated = replace(
        account,
        balance=account.balance + amount,
        refunded=account.refunded + amount,
        usage=_used(account.usage, now, calls=0, spent=0, refunded=amount),
    )
    return updated, updated.balance


def apply_settle(
    account: CreditAccount | None, release: int, call: UsedCall, *, now: float
) -> tuple[CreditAccount | None, int | None]:
    """The account after settling ``call`` (None: absent, nothing to write) and its balance."""
    check_used_call(call)
    if not isinstance(release, int) or release < 0:
        raise ValueError(f"release must be an integer of 0 or more, not {release!r}")
    account = live(account, now)
    if account is None:
        return None, None
    updated = replace(
        account,
        balance=account.balance + release,
        refunded=account.refunded + release,
        usage=_used(account.usage, now, calls=0, spent=0, refunded=release)
        if release
        else account.usage,
        used_calls=(call, *account.used_calls)[:USED_CALLS],
    )
    return updated, updated.balance


def check_used_call(call: UsedCall) -> None:
    """A store records only a call that makes sense: ``ValueError`` otherwise."""
    if not call.route or len(call.route) > USED_CALL_ROUTE:
        raise ValueError(f"a used call's route is 1 to {USED_CALL_ROUTE} characters")
    _positive("reserved", call.reserved)
    if not isinstance(call.charged, int) or not 0 <= call.charged <= call.reserved:
        raise ValueError(f"charged must be 0 to reserved ({call.reserved}), not {call.charged!r}")


def _used(
    usage: tuple[UsageBucket, ...], now: float, *, calls: int, spent: int, refunded: int
) -> tuple[UsageBucket, ...]:
    """``usage`` (newest first) with this hour's bucket added to, at most USAGE_BUCKETS long."""
    start = bucket_start(now)
    if usage and usage[0].start == start:
        head = usage[0]
        bucket = UsageBucket(
            start, head.calls + calls, head.spent + spent, head.refunded + refunded
        )
        return (bucket, *usage[1:])
    return (UsageBucket(start, calls, spent, refunded), *usage)[:USAGE_BUCKETS]


# ------------------------------------------------------------ JSON, as durable stores keep it


def encode_account(account: CreditAccount, *, entries: bool = True, used_calls: bool = True) -> str:
    """Strict compact JSON; ``entries=False`` / ``used_calls=False`` leave those out.

    A store that keeps them apart leaves them out: the account is read and
    written on every spend, and a hundred used calls make its JSON some
    twenty times longer (the sqlite store keeps them in a table of their own).
    """
    document: dict[str, Any] = {
        "grant_id": account.grant_id,
        "balance": account.balance,
        "credited": account.credited,
        "spent": account.spent,
        "refunded": account.refunded,
        "calls": account.calls,
        "window_end": account.window_end,
        "window_calls": account.window_calls,
        "keep_until": account.keep_until,
        "usage": [[b.start, b.calls, b.spent, b.refunded] for b in account.usage],
    }
    if used_calls:
        document["used_calls"] = [
            [c.at, c.route, c.reserved, c.charged] for c in account.used_calls
        ]
    if entries:
        document["entries"] = [[e.key, e.amount, e.at] for e in account.entries]
    return json.dumps(document, separators=(",", ":"), allow_nan=False)


def decode_account(text: str) -> CreditAccount:
    data = json.loads(text)
    return CreditAccount(
        grant_id=str(data["grant_id"]),
        balance=int(data["balance"]),
        credited=int(data["credited"]),
        spent=int(data["spent"]),
        refunded=int(data["refunded"]),
        calls=int(data["calls"]),
        window_end=int(data["window_end"]),
        window_calls=int(data["window_calls"]),
        keep_until=float(data["keep_until"]),
        entries=tuple(
            CreditEntry(str(k), int(a), float(at)) for k, a, at in data.get("entries", ())
        ),
        usage=tuple(UsageBucket(int(s), int(c), int(sp), int(r)) for s, c, sp, r in data["usage"]),
        used_calls=tuple(
            UsedCall(float(at), str(route), int(reserved), int(charged))
            for at, route, reserved, charged in data.get("used_calls", ())
        ),
    )
