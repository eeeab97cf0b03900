"""The Redis store's refunds (``RefundStore``), mixed into ``RedisStore``.

The claim is one Lua script (``refund_scripts.CREATE_REFUND``): it adds what
the purchase's refunds hold and inserts the new one only if the total stays
within what the purchase paid, in one atomic step on the primary. A move reads
the record, lets ``x402srv.refunds.rules`` decide, and writes through
``MOVE_REFUND`` only if the record's version did not change meanwhile (else
it reads again): a compare-and-set, as for challenges.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Sequence
from typing import Any

from redis.asyncio import Redis

from x402srv.plugin import (
    OverRefund,
    RefundCreated,
    RefundMismatch,
    RefundMove,
    RefundMoved,
    RefundRecord,
    RefundState,
    StoreUnavailable,
    decide_move,
    listed,
    nameable,
)

from .keys import KeySpace

__all__ = ["RefundMethods"]

#: Rounds of read-decide-write one move may lose to other writers of the refund.
MAX_ROUNDS = 64


def _encode(record: RefundRecord) -> str:
    return json.dumps(record.to_dict(), separators=(",", ":"))


def _decode(text: str) -> RefundRecord:
    return RefundRecord.from_dict(json.loads(text))


class RefundMethods:
    """``create_refund``/``move_refund``/... over ``_script`` and ``_call`` (see ``RedisStore``)."""

    keys: KeySpace

    async def _script(self, name: str, *, keys: list[str], args: list[Any]) -> Any:
        raise NotImplementedError

    async def _call(self, op: str, command: Awaitable[Any]) -> Any:
        raise NotImplementedError

    def _redis(self) -> Redis:
        raise NotImplementedError

    def _rf(self, refund_id: str) -> str:
        return f"{self.keys.prefix}rf:{refund_id}"

    def _rf_of(self, purchase_id: str) -> str:
        return f"{self.keys.prefix}rf-of:{purchase_id}"

    @property
    def _rf_by_created(self) -> str:
        return f"{self.keys.prefix}rf-by-created"

    def _rf_by_state(self, state: RefundState) -> str:
        return f"{self.keys.prefix}rf-by-state:{state.value}"

    async def create_refund(self, refund: RefundRecord, *, paid: int) -> RefundCreated | OverRefund:
        reply = await self._script(
            "CREATE_REFUND",
            keys=[
                self._rf(refund.refund_id),
                self._rf_of(refund.purchase_id),
                self._rf_by_created,
                self._rf_by_state(refund.state),
            ],
            args=[
                refund.refund_id,
                _encode(refund),
                refund.amount,
                str(paid),
                repr(float(refund.created_at)),
                refund.state.value,
            ],
        )
        outcome = _text(reply[0])
        if outcome == "known":
            return RefundCreated(_decode(_text(reply[1])), created=False)
        if outcome == "over":
            return OverRefund(refund.purchase_id, max(0, paid - int(_text(reply[1]))))
        return RefundCreated(refund)

    async def move_refund(self, move: RefundMove) -> RefundMoved | RefundMismatch:
        current = await self.get_refund(move.refund_id)
        for _ in range(MAX_ROUNDS):
            decided = decide_move(current, move)
            if isinstance(decided, RefundMismatch) or current is None:
                return decided
            record = decided.record
            reply = await self._script(
                "MOVE_REFUND",
                keys=[
                    self._rf(record.refund_id),
                    self._rf_of(record.purchase_id),
                    self._rf_by_state(current.state),
                    self._rf_by_state(record.state),
                ],
                args=[
                    record.refund_id,
                    str(current.version),
                    _encode(record),
                    record.state.value,
                    record.amount,
                    repr(float(record.created_at)),
                    str(record.version),
                ],
            )
            if reply == 1:
                return decided
            text = _text(reply)
            current = _decode(text) if text else None
        raise StoreUnavailable("The store is busy; retry shortly.", retry_after=1)

    async def get_refund(self, refund_id: str) -> RefundRecord | None:
        if not nameable(refund_id):
            return None
        text = await self._call("get_refund", self._redis().hget(self._rf(refund_id), "json"))
        return _decode(_text(text)) if text is not None else None

    async def list_refunds(
        self,
        *,
        purchase_id: str | None = None,
        states: Sequence[RefundState] | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[RefundRecord]:
        if purchase_id is not None:
            if not nameable(purchase_id):
                return []
            ids = await self._call("list_refunds", self._redis().hkeys(self._rf_of(purchase_id)))
            found = await self._records([_text(i) for i in ids])
            return listed(found, purchase_id=None, states=states, after=after, limit=limit)
        indexes = (
            [self._rf_by_created] if states is None else [self._rf_by_state(s) for s in states]
        )
        found = []
        for index in indexes:
            found += await self._records(await self._ids_after(index, after, limit))
        return listed(found, purchase_id=None, states=states, after=after, limit=limit)

    async def _ids_after(
        self, index: str, after: tuple[float, str] | None, limit: int
    ) -> list[str]:
        """The first ``limit`` ids of ``index`` strictly after the cursor (ties by id, as Redis
        orders equal scores)."""
        low = "-inf" if after is None else repr(float(after[0]))
        ids: list[str] = []
        offset = 0
        while len(ids) < limit:
            page = await self._call(
                "list_refunds",
                self._redis().zrangebyscore(
                    index, low, "+inf", start=offset, num=limit + 16, withscores=True
                ),
            )
            for member, score in page:
                member = _text(member)
                if after is None or (float(score), member) > after:
                    ids.append(member)
            if len(page) < limit + 16:
                break
            offset += len(page)
        return ids[:limit]

    async def _records(self, ids: list[str]) -> list[RefundRecord]:
        if not ids:
            return []
        pipe = self._redis().pipeline(transaction=False)
        for refund_id in ids:
            pipe.hget(self._rf(refund_id), "json")
        texts = await self._call("list_refunds", pipe.execute())
        return [_decode(_text(t)) for t in texts if t is not None]

    async def import_refunds(self, refunds: Sequence[RefundRecord]) -> None:
        client = self._redis()
        for refund in refunds:
            if await self._call("import_refunds", client.exists(self._rf(refund.refund_id))):
                raise ValueError(f"refund {refund.refund_id} exists")
        pipe = client.pipeline(transaction=True)
        for r in refunds:
            score = float(r.created_at)
            pipe.hset(
                self._rf(r.refund_id),
                mapping={"json": _encode(r), "state": r.state.value, "ver": str(r.version)},
            )
            pipe.hset(self._rf_of(r.purchase_id), r.refund_id, f"{r.state.value} {r.amount}")
            pipe.zadd(self._rf_by_created, {r.refund_id: score})
            pipe.zadd(self._rf_by_state(r.state), {r.refund_id: score})
        await self._call("import_refunds", pipe.execute())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
