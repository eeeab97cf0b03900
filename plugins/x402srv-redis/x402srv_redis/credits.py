"""The Redis store's credit methods (``CreditStore``): one Lua script per call.

``RedisStore`` mixes this in; the scripts are in ``credit_scripts``, the key
names in ``keys``. Every call is one round trip, which is what keeps a metered
call through the gateway within one store round trip of an unmetered one.
"""

from __future__ import annotations

import json
from typing import Any

from x402srv.plugin import (
    USAGE_BUCKETS,
    USED_CALLS,
    CreditAccount,
    Credited,
    CreditEntry,
    RateWindow,
    Spend,
    SpendOutcome,
    UsageBucket,
    UsedCall,
    bucket_start,
    check_used_call,
    nameable,
    window_end,
)

from .keys import KeySpace

__all__ = ["CreditMethods", "decode_used_call", "encode_used_call"]


class CreditMethods:
    """``credit``/``spend``/``refund``/``settle``/``get_credits`` over ``_script``."""

    keys: KeySpace

    async def _script(self, name: str, *, keys: list[str], args: list[Any]) -> Any:
        raise NotImplementedError

    def _grant_keys(self, grant_id: str) -> list[str]:
        k = self.keys
        return [
            k.credits(grant_id),
            k.credit_keys(grant_id),
            k.usage(grant_id),
            k.used_calls(grant_id),
        ]

    async def credit(
        self, grant_id: str, amount: int, *, key: str, now: float, keep_until: float
    ) -> Credited:
        _positive("amount", amount)
        applied, balance = await self._script(
            "CREDIT",
            keys=self._grant_keys(grant_id),
            args=[amount, key, repr(float(now)), repr(float(keep_until))],
        )
        return Credited(int(balance), applied=int(applied) == 1)

    async def spend(
        self,
        grant_id: str,
        cost: int,
        *,
        now: float,
        keep_until: float,
        rate: RateWindow | None = None,
        credits: bool = True,
    ) -> Spend:
        _positive("cost", cost)
        if rate is not None:
            _positive("rate.limit", rate.limit)
            _positive("rate.seconds", rate.seconds)
        limit, end = (0, 0) if rate is None else (rate.limit, window_end(now, rate.seconds))
        outcome, balance, counted, ended = await self._script(
            "SPEND",
            keys=self._grant_keys(grant_id),
            args=[
                cost,
                repr(float(now)),
                repr(float(keep_until)),
                "1" if credits else "0",
                limit,
                str(end),
                str(bucket_start(now)),
                USAGE_BUCKETS,
            ],
        )
        return Spend(
            SpendOutcome(outcome),
            int(balance) if balance != "" else None,
            int(counted),
            int(ended),
        )

    async def refund(self, grant_id: str, amount: int, *, now: float) -> int | None:
        _positive("amount", amount)
        balance = await self._script(
            "REFUND",
            keys=self._grant_keys(grant_id),
            args=[amount, repr(float(now)), str(bucket_start(now)), USAGE_BUCKETS],
        )
        return int(balance) if balance is not None else None

    async def settle(
        self, grant_id: str, release: int, *, now: float, call: UsedCall
    ) -> int | None:
        check_used_call(call)
        if not isinstance(release, int) or release < 0:
            raise ValueError(f"release must be an integer of 0 or more, not {release!r}")
        balance = await self._script(
            "SETTLE",
            keys=self._grant_keys(grant_id),
            args=[
                release,
                repr(float(now)),
                str(bucket_start(now)),
                USAGE_BUCKETS,
                encode_used_call(call),
                USED_CALLS,
            ],
        )
        return int(balance) if balance is not None else None

    async def get_credits(self, grant_id: str) -> CreditAccount | None:
        if not nameable(grant_id):
            return None
        found = await self._script("GET_CREDITS", keys=self._grant_keys(grant_id), args=[])
        if not found:
            return None
        fields = _pairs(found[0])
        entries = []
        for key, value in _pairs(found[1]).items():
            seq, amount, at = value.split(" ")
            entries.append((int(seq), CreditEntry(key, int(amount), float(at))))
        usage = []
        for line in found[2]:
            start, calls, spent, refunded = (int(part) for part in line.split(" "))
            usage.append(UsageBucket(start, calls, spent, refunded))
        return CreditAccount(
            grant_id=grant_id,
            balance=int(fields["bal"]),
            credited=int(fields["cred"]),
            spent=int(fields["spent"]),
            refunded=int(fields["refd"]),
            calls=int(fields["calls"]),
            window_end=int(fields["wend"]),
            window_calls=int(fields["wcalls"]),
            keep_until=float(fields["keep"]),
            entries=tuple(entry for _, entry in sorted(entries, key=lambda pair: pair[0])),
            usage=tuple(usage),
            used_calls=tuple(decode_used_call(line) for line in found[3]),
        )


def encode_used_call(call: UsedCall) -> str:
    return json.dumps([call.at, call.route, call.reserved, call.charged], separators=(",", ":"))


def decode_used_call(line: str) -> UsedCall:
    at, route, reserved, charged = json.loads(line)
    return UsedCall(float(at), str(route), int(reserved), int(charged))


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
