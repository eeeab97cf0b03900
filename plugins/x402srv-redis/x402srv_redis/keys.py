"""Where the Redis store keeps what: every key name, in one place.

With the default prefix ``x402srv:``::

    x402srv:c:<challengeId>         hash   json (ChallengeRecord.to_dict), state,
                                           updated_at, rid, ver (a write counter),
                                           payer (store_rules.payer_of, when there is one)
    x402srv:rid:<requestId>         string challengeId          (the requestId index)
    x402srv:pay:<chain:asset:from:nonce>  string challengeId    (payment claim)
    x402srv:tx:<txHash>             string challengeId          (txHash claim, lowercase)
    x402srv:claims:<challengeId>    set    the claim keys this challenge owns
    x402srv:by-updated              zset   challengeId by updated_at (listing)
    x402srv:by-state:<STATE>        zset   challengeId by updated_at, one per state
    x402srv:by-payer:<payer>        zset   challengeId by updated_at, one per payer (lowercase)
    x402srv:lease:<name>            hash   holder, fence, expires_at, released, value
    x402srv:task:<taskId>           hash   doc (JSON), ver
    x402srv:tasks-by-prune          zset   taskId by prune_after (tasks that have one)
    x402srv:hits:<key>              hash   n (hits), end (window_end)   (count_hits)
    x402srv:counts:<bucket>         hash   name -> count                (add_counts)
    x402srv:count-buckets           zset   bucket by bucket: which count hashes exist
    x402srv:cr:<grantId>            hash   bal, cred, spent, refd, calls, wend, wcalls,
                                           keep (keep_until), n (entries so far)  (credits)
    x402srv:cr:<grantId>:k          hash   credited key -> "<seq> <amount> <at>"
    x402srv:cr:<grantId>:u          list   "<hour> <calls> <spent> <refunded>", newest first
    x402srv:cr:<grantId>:c          list   JSON [at, route, reserved, charged] per call
                                           charged by use, newest first (``settle``)

Records, their indexes, claims and tasks expire ``record_ttl_seconds`` after
their last write, and so does a payer's set (renewed with each of its records);
hit counters at the end of their window by the caller's clock (the TTL is
``window_end - now`` of the last call); a grant's credit keys at its
``keep_until`` by the caller's clock, reset by each write. Count buckets leave
when a later ``add_counts`` forgets them. Leases never expire (their
fence must only grow), nor do the sorted sets, whose members ``prune`` and
``prune_tasks`` remove with the records and tasks (and members whose record or
task expired first).

The Lua scripts derive some key names from the prefix themselves (every key
of the records ``CREATE`` writes, a record's claims, the records a listing
returns), so the store needs one Redis primary, not a Redis Cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from x402srv.plugin import State

__all__ = ["KeySpace"]


@dataclass(frozen=True, slots=True)
class KeySpace:
    """Key names under one prefix; the scripts build the same names from ``prefix``."""

    prefix: str

    def challenge(self, challenge_id: str) -> str:
        return f"{self.prefix}c:{challenge_id}"

    def request(self, request_id: str) -> str:
        return f"{self.prefix}rid:{request_id}"

    def payment(self, key: str) -> str:
        return f"{self.prefix}pay:{key}"

    def tx(self, tx_hash: str) -> str:
        return f"{self.prefix}tx:{tx_hash}"

    def claims(self, challenge_id: str) -> str:
        return f"{self.prefix}claims:{challenge_id}"

    @property
    def by_updated(self) -> str:
        return f"{self.prefix}by-updated"

    def by_state(self, state: State) -> str:
        return f"{self.prefix}by-state:{state.value}"

    def lease(self, name: str) -> str:
        return f"{self.prefix}lease:{name}"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}task:{task_id}"

    @property
    def tasks_by_prune(self) -> str:
        return f"{self.prefix}tasks-by-prune"

    def hits(self, key: str) -> str:
        return f"{self.prefix}hits:{key}"

    def by_payer(self, payer: str) -> str:
        return f"{self.prefix}by-payer:{payer}"

    @property
    def count_buckets(self) -> str:
        return f"{self.prefix}count-buckets"

    def credits(self, grant_id: str) -> str:
        return f"{self.prefix}cr:{grant_id}"

    def credit_keys(self, grant_id: str) -> str:
        return f"{self.prefix}cr:{grant_id}:k"

    def usage(self, grant_id: str) -> str:
        return f"{self.prefix}cr:{grant_id}:u"

    def used_calls(self, grant_id: str) -> str:
        return f"{self.prefix}cr:{grant_id}:c"
