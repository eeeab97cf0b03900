"""The Redis store's export and import (``PortableStore``), mixed into ``RedisStore``.

Export walks the keys of the store's prefix (``keys``): challenges through the
``by-updated`` set, a page at a time, each with the claims its ``claims:`` set
names; tasks, credit accounts and leases by ``SCAN``. It reads while others may
write: stop the servers first for an export that is one moment of the store.

Import writes one batch in one ``MULTI``/``EXEC`` transaction, after checking
that none of its records, requestIds, claims, tasks or live credit accounts
exists (a ``ValueError`` otherwise, nothing written). Records, indexes, claims
and tasks get ``record_ttl_seconds`` from the import; credit keys expire at
their account's ``keep_until``, as the credit scripts set them. A lease that
exists keeps its holder and value and raises its fence to the imported one.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from x402srv.plugin import (
    CreditAccount,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    Secret,
    decode_record,
    decode_task,
    encode_record,
    encode_task,
    payer_of,
    sort_items,
)

from .connection import converted
from .credits import encode_used_call
from .keys import KeySpace
from .options import RedisOptions

__all__ = ["PAGE", "DumpMethods"]

#: Challenges per page of an export (one pipeline each).
PAGE = 500

#: A lease that exists keeps holder and value; its fence becomes at least ARGV[1].
_RAISE_FENCE = """#!lua
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if fence < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'fence', ARGV[1]) end
if redis.call('HEXISTS', KEYS[1], 'released') == 0 then
  redis.call('HSET', KEYS[1], 'holder', '', 'expires_at', '0', 'released', '1')
  if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'value', ARGV[3]) end
end
return 1
"""


def _glob(text: str) -> str:
    """``text`` matched literally by ``SCAN MATCH`` (a prefix may hold ``*`` or ``[``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


class DumpMethods:
    """``export_items``/``import_items`` (see ``RedisStore``)."""

    keys: KeySpace
    options: RedisOptions
    url: Secret

    if TYPE_CHECKING:  # RedisStore's own

        def _redis(self) -> Redis: ...

        async def get_credits(self, grant_id: str) -> CreditAccount | None: ...

        async def _call(self, op: str, command: Awaitable[Any]) -> Any: ...

    # ------------------------------------------------------------ export

    async def export_items(self) -> AsyncIterator[ExportItem]:
        async for challenge in self._export_challenges():
            yield challenge
        async for task in self._export_tasks():
            yield task
        for grant_id in sorted(await self._scan("cr:", suffixes=(":k", ":u", ":c"))):
            account = await self.get_credits(grant_id)
            if account is not None:
                yield account
        for name in sorted(await self._scan("lease:")):
            fence, value = await self._call(
                "export", self._redis().hmget(self.keys.lease(name), ["fence", "value"])
            )
            if fence is not None:
                yield ExportedLease(name, int(fence), value)

    async def _export_challenges(self) -> AsyncIterator[ExportedChallenge]:
        k = self.keys
        ids = await self._call("export", self._redis().zrange(k.by_updated, 0, -1))
        pay, tx = k.payment(""), k.tx("")
        for start in range(0, len(ids), PAGE):
            page = ids[start : start + PAGE]
            pipe = self._redis().pipeline(transaction=False)
            for challenge_id in page:
                pipe.hget(k.challenge(challenge_id), "json")
                pipe.smembers(k.claims(challenge_id))
            found = await self._call("export", pipe.execute())
            for i in range(len(page)):
                text, claims = found[2 * i], found[2 * i + 1]
                if text is None:  # expired by its TTL, or pruned meanwhile
                    continue
                yield ExportedChallenge(
                    decode_record(text),
                    tuple(sorted(c[len(pay) :] for c in claims if c.startswith(pay))),
                    tuple(sorted(c[len(tx) :] for c in claims if c.startswith(tx))),
                )

    async def _export_tasks(self) -> AsyncIterator[ExportedTask]:
        k = self.keys
        for task_id in sorted(await self._scan("task:")):
            document, version = await self._call(
                "export", self._redis().hmget(k.task(task_id), ["doc", "ver"])
            )
            after = await self._call("export", self._redis().zscore(k.tasks_by_prune, task_id))
            if document is not None and version is not None:
                yield ExportedTask(task_id, decode_task(document), int(version), after)

    async def _scan(self, kind: str, *, suffixes: tuple[str, ...] = ()) -> list[str]:
        """The names after ``<prefix><kind>`` of every key of that kind."""
        start = self.keys.prefix + kind
        names = []
        with converted("export", self.url):
            async for key in self._redis().scan_iter(match=_glob(start) + "*", count=1000):
                name = key[len(start) :]
                if not (suffixes and name.endswith(suffixes)):
                    names.append(name)
        return names

    # ------------------------------------------------------------ import

    async def import_items(self, items: Sequence[ExportItem], *, now: float) -> None:
        batch = sort_items(items)
        accounts = batch.live_accounts(now)
        await self._refuse_what_exists(batch.challenges, batch.tasks, accounts, now)
        k, ttl = self.keys, self.options.record_ttl_seconds
        pipe = self._redis().pipeline(transaction=True)
        for item in batch.challenges:
            record, cid = item.record, item.record.challenge_id
            at = repr(record.updated_at)
            pipe.hset(
                k.challenge(cid),
                mapping={
                    "json": encode_record(record),
                    "state": record.state.value,
                    "updated_at": at,
                    "rid": record.request_id,
                    "ver": "1",
                },
            )
            pipe.expire(k.challenge(cid), ttl)
            pipe.set(k.request(record.request_id), cid, ex=ttl)
            pipe.zadd(k.by_updated, {cid: at})
            pipe.zadd(k.by_state(record.state), {cid: at})
            payer = payer_of(record)
            if payer:
                pipe.hset(k.challenge(cid), "payer", payer)
                pipe.zadd(k.by_payer(payer), {cid: at})
                pipe.expire(k.by_payer(payer), ttl)
            claims = [k.payment(key) for key in item.payment_claims]
            claims += [k.tx(tx) for tx in item.tx_claims]
            for claim in claims:
                pipe.set(claim, cid, ex=ttl)
            if claims:
                pipe.sadd(k.claims(cid), *claims)
                pipe.expire(k.claims(cid), ttl)
        for task in batch.tasks:
            pipe.hset(
                k.task(task.task_id),
                mapping={"doc": encode_task(task.document), "ver": str(task.version)},
            )
            pipe.expire(k.task(task.task_id), ttl)
            if task.prune_after is not None:
                pipe.zadd(k.tasks_by_prune, {task.task_id: repr(float(task.prune_after))})
        for account in accounts:
            self._write_account(pipe, account, now)
        await self._call("import", pipe.execute())
        raise_fence = self._redis().register_script(_RAISE_FENCE)
        for lease in batch.leases:
            args = [lease.fence, "0" if lease.value is None else "1", lease.value or ""]
            await self._call("import", raise_fence(keys=[k.lease(lease.name)], args=args))

    def _write_account(self, pipe: Any, account: CreditAccount, now: float) -> None:
        """The four keys of ``credit_scripts``, as its scripts leave them."""
        k, grant = self.keys, account.grant_id
        keys = [k.credits(grant), k.credit_keys(grant), k.usage(grant), k.used_calls(grant)]
        pipe.delete(*keys)  # what a forgotten account left
        pipe.hset(
            keys[0],
            mapping={
                "bal": account.balance,
                "cred": account.credited,
                "spent": account.spent,
                "refd": account.refunded,
                "calls": account.calls,
                "wend": account.window_end,
                "wcalls": account.window_calls,
                "keep": repr(float(account.keep_until)),
                "n": len(account.entries),
            },
        )
        if account.entries:
            pipe.hset(
                keys[1],
                mapping={
                    e.key: f"{seq} {e.amount} {e.at!r}"
                    for seq, e in enumerate(account.entries, start=1)
                },
            )
        if account.usage:
            pipe.rpush(
                keys[2], *(f"{u.start} {u.calls} {u.spent} {u.refunded}" for u in account.usage)
            )
        if account.used_calls:
            pipe.rpush(keys[3], *(encode_used_call(call) for call in account.used_calls))
        ttl_ms = max(1, math.ceil((account.keep_until - now) * 1000))
        for key in keys:
            pipe.pexpire(key, ttl_ms)

    async def _refuse_what_exists(
        self,
        challenges: list[ExportedChallenge],
        tasks: list[ExportedTask],
        accounts: list[CreditAccount],
        now: float,
    ) -> None:
        k = self.keys
        names: list[tuple[str, str]] = []
        for item in challenges:
            names.append(
                (f"challenge {item.record.challenge_id}", k.challenge(item.record.challenge_id))
            )
            names.append(
                (f"request id {item.record.request_id}", k.request(item.record.request_id))
            )
            names += [(f"payment claim {key}", k.payment(key)) for key in item.payment_claims]
            names += [(f"txHash claim {tx}", k.tx(tx)) for tx in item.tx_claims]
        names += [(f"task {task.task_id}", k.task(task.task_id)) for task in tasks]
        pipe = self._redis().pipeline(transaction=False)
        for _, key in names:
            pipe.exists(key)
        for account in accounts:
            pipe.hget(k.credits(account.grant_id), "keep")
        found = await self._call("import", pipe.execute()) if names or accounts else []
        for (what, _), exists in zip(names, found, strict=False):
            if exists:
                raise ValueError(f"the store already holds {what}")
        for account, keep in zip(accounts, found[len(names) :], strict=True):
            if keep is not None and float(keep) >= now:
                raise ValueError(f"the store already holds the credits of {account.grant_id}")
