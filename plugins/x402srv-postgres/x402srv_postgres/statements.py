"""The store's SQL, qualified with its schema once, when the store is built.

Every value is a bind parameter. The templates below name tables as
``{schema}.table``; ``Statements`` puts the schema (a validated identifier,
``options``) there, quoted, and a listing adds only placeholders for the
filters it uses. asyncpg prepares each distinct text once per connection and
reuses it.

Locks, where a statement takes any: the compare-and-set ``UPDATE`` of
``transition()`` (migrations/0001) locks one record for the length of one
call; batch deletes (``prune``, ``prune_tasks``, the counter sweep) take their
rows ``FOR UPDATE SKIP LOCKED``, so a reconciler's batch never waits for a
record a buyer's request is moving, and the request never waits for the batch.
Reads take no lock at all (MVCC).
"""

from __future__ import annotations

from x402srv.plugin import nameable

__all__ = ["Statements", "storable"]


def storable(key: str) -> bool:
    """Whether PostgreSQL text can hold ``key``: UTF-8, and no NUL (which sqlite takes)."""
    return nameable(key) and "\x00" not in key


#: $1 limit; the filters' placeholders follow (``Statements.listing``).
_LISTING = (
    "SELECT record FROM {schema}.challenges{where} ORDER BY updated_at, challenge_id LIMIT $1"
)

_TEMPLATES = {
    # ------------------------------------------------------------ challenges
    # Many creates in one statement (``batch``): $1..$5 arrays of the columns, in call order.
    "insert_challenges": (
        "INSERT INTO {schema}.challenges (challenge_id, request_id, state, updated_at, record) "
        "SELECT i, r, s, u, j FROM unnest($1::text[], $2::text[], $3::text[], "
        "$4::float8[], $5::text[]) WITH ORDINALITY AS t(i, r, s, u, j, n) ORDER BY n "
        "ON CONFLICT DO NOTHING RETURNING challenge_id"
    ),
    "records_by_request": (
        "SELECT request_id, record FROM {schema}.challenges WHERE request_id = ANY($1::text[])"
    ),
    "create_claimed": (
        "SELECT outcome, existing FROM {schema}.create_claimed($1, $2, $3, $4, $5, $6)"
    ),
    "record_by_id": "SELECT record FROM {schema}.challenges WHERE challenge_id = $1",
    "versioned_by_id": "SELECT record, version FROM {schema}.challenges WHERE challenge_id = $1",
    "record_by_request": "SELECT record FROM {schema}.challenges WHERE request_id = $1",
    "record_by_payment": (
        "SELECT c.record FROM {schema}.payment_claims AS p "
        "JOIN {schema}.challenges AS c USING (challenge_id) WHERE p.payment_key = $1"
    ),
    "record_by_tx": (
        "SELECT c.record FROM {schema}.tx_claims AS t "
        "JOIN {schema}.challenges AS c USING (challenge_id) WHERE t.tx_hash = $1"
    ),
    "transition": "SELECT {schema}.transition($1, $2, $3, $4, $5, $6, $7, $8)",
    # Records and (ON DELETE CASCADE) every claim they own, oldest first.
    "prune": (
        "WITH doomed AS (SELECT challenge_id FROM {schema}.challenges "
        "WHERE state = ANY($1::text[]) AND updated_at < $2 "
        "ORDER BY updated_at, challenge_id LIMIT $3 FOR UPDATE SKIP LOCKED), "
        "gone AS (DELETE FROM {schema}.challenges AS c USING doomed "
        "WHERE c.challenge_id = doomed.challenge_id RETURNING 1) "
        "SELECT count(*) FROM gone"
    ),
    # ------------------------------------------------------------ tasks
    "create_task": (
        "INSERT INTO {schema}.tasks (task_id, version, document, prune_after) "
        "VALUES ($1, 1, $2, $3) ON CONFLICT DO NOTHING RETURNING version"
    ),
    "replace_task": (
        "UPDATE {schema}.tasks SET version = version + 1, document = $2, prune_after = $3 "
        "WHERE task_id = $1 AND version = $4 RETURNING version"
    ),
    "task": "SELECT document, version FROM {schema}.tasks WHERE task_id = $1",
    "prune_tasks": (
        "WITH due AS (SELECT task_id FROM {schema}.tasks WHERE prune_after < $1 "
        "ORDER BY prune_after LIMIT $2 FOR UPDATE SKIP LOCKED), "
        "gone AS (DELETE FROM {schema}.tasks AS t USING due WHERE t.task_id = due.task_id "
        "RETURNING 1) SELECT count(*) FROM gone"
    ),
    # ------------------------------------------------------------ hit counters
    # $1 now, $2 the window's end, $3 keys (sorted: rows lock in one order), $4 deltas.
    "add_hits": (
        "INSERT INTO {schema}.rate_counters AS r (key, window_end, hits) "
        "SELECT k, $2, d FROM unnest($3::text[], $4::bigint[]) AS t(k, d) "
        "ON CONFLICT (key) DO UPDATE SET hits = CASE WHEN r.window_end < $1 "
        "THEN excluded.hits ELSE r.hits + excluded.hits END, window_end = excluded.window_end "
        "RETURNING key, hits"
    ),
    "sweep_counters": (
        "DELETE FROM {schema}.rate_counters WHERE key IN (SELECT key FROM {schema}.rate_counters "
        "WHERE window_end < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
    ),
    # ------------------------------------------------------------ console (migrations/0003)
    # $1 buckets, $2 names, $3 deltas, sorted by (bucket, name): rows lock in one order.
    "add_counts": (
        "INSERT INTO {schema}.counts AS c (bucket, name, n) "
        "SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[]) "
        "ON CONFLICT (bucket, name) DO UPDATE SET n = c.n + excluded.n"
    ),
    "forget_counts": (
        "DELETE FROM {schema}.counts WHERE (bucket, name) IN (SELECT bucket, name "
        "FROM {schema}.counts WHERE bucket < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
    ),
    "read_counts": "SELECT bucket, name, n FROM {schema}.counts WHERE bucket >= $1 AND bucket < $2",
    # ------------------------------------------------------------ credits (migrations/0002)
    "account": "SELECT account, version FROM {schema}.credits WHERE grant_id = $1",
    "account_for_credit": (
        "SELECT account, version, EXISTS (SELECT 1 FROM {schema}.credit_entries "
        "WHERE grant_id = $1 AND key = $2) AS credited FROM {schema}.credits WHERE grant_id = $1"
    ),
    "save_account": "SELECT {schema}.save_account($1, $2, $3, $4, $5, $6, $7, $8)",
    "account_with_entries": (
        "SELECT c.account, "
        "ARRAY(SELECT key FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS keys, "
        "ARRAY(SELECT amount FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS amounts, "
        "ARRAY(SELECT at FROM {schema}.credit_entries e WHERE e.grant_id = c.grant_id "
        "ORDER BY seq) AS ats "
        "FROM {schema}.credits c WHERE c.grant_id = $1"
    ),
    # Accounts past keep_until, with their entries (ON DELETE CASCADE).
    "sweep_accounts": (
        "DELETE FROM {schema}.credits WHERE grant_id IN (SELECT grant_id FROM {schema}.credits "
        "WHERE keep_until < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
    ),
    # ------------------------------------------------------------ leases
    # $1 name, $2 holder, $3 expires_at, $4 now: a free, released or expired lease only.
    "acquire_lease": (
        "INSERT INTO {schema}.leases AS l (name, holder, fence, expires_at, released, value) "
        "VALUES ($1, $2, 1, $3, false, NULL) "
        "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, fence = l.fence + 1, "
        "expires_at = excluded.expires_at, released = false "
        "WHERE l.released OR l.expires_at <= $4 "
        "RETURNING fence, value"
    ),
    "release_lease": (
        "UPDATE {schema}.leases SET released = true, value = coalesce($1, value) "
        "WHERE name = $2 AND fence = $3 AND holder = $4 RETURNING true"
    ),
    # $1 name, $2 now: the lease while someone holds it.
    "held_lease": (
        "SELECT holder, fence, expires_at, value FROM {schema}.leases "
        "WHERE name = $1 AND NOT released AND expires_at > $2"
    ),
    # $1 new holder, $2 expires_at, $3 name, $4 holder read, $5 fence read. A racing
    # update makes this one re-check its WHERE on the new row: one taker wins.
    "take_over_lease": (
        "UPDATE {schema}.leases SET holder = $1, fence = fence + 1, expires_at = $2 "
        "WHERE name = $3 AND holder = $4 AND fence = $5 AND NOT released "
        "RETURNING fence, value"
    ),
}


class Statements:
    """Each template of this module as an attribute, for one schema."""

    insert_challenges: str
    records_by_request: str
    create_claimed: str
    record_by_id: str
    versioned_by_id: str
    record_by_request: str
    record_by_payment: str
    record_by_tx: str
    transition: str
    prune: str
    create_task: str
    replace_task: str
    task: str
    prune_tasks: str
    add_hits: str
    sweep_counters: str
    acquire_lease: str
    release_lease: str
    held_lease: str
    take_over_lease: str
    account: str
    account_for_credit: str
    save_account: str
    account_with_entries: str
    sweep_accounts: str
    add_counts: str
    forget_counts: str
    read_counts: str

    def __init__(self, schema: str) -> None:
        self.schema = schema
        quoted = f'"{schema}"'
        for name, template in _TEMPLATES.items():
            setattr(self, name, template.replace("{schema}", quoted))
        self._listings: dict[tuple[bool, bool, bool], str] = {}
        self._finds: dict[tuple[str, bool, bool], str] = {}

    def listing(self, *, states: bool, before: bool, after: bool) -> str:
        """``list_challenges``: $1 limit, then states, updated_before, cursor, as used."""
        key = (states, before, after)
        if key not in self._listings:
            clauses, n = [], 2
            if states:
                clauses.append(f"state = ANY(${n}::text[])")
                n += 1
            if before:
                clauses.append(f"updated_at < ${n}")
                n += 1
            if after:
                clauses.append(f"(updated_at, challenge_id) > (${n}, ${n + 1})")
            where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
            statement = _LISTING.replace("{schema}", f'"{self.schema}"')
            self._listings[key] = statement.replace("{where}", where)
        return self._listings[key]

    def find(self, *, by: str, states: bool, before: bool) -> str:
        """``find_challenges``, newest first; $1 limit, then its filters.

        ``by`` is ``"payer"`` ($2 payer, states filter that one index range),
        ``"states"`` ($2 states: one backward index range per state, merged by
        a LATERAL join) or ``"all"``; the cursor ``(updated_at, challenge_id)``
        comes last.
        """
        key = (by, states, before)
        if key in self._finds:
            return self._finds[key]
        table = f'"{self.schema}".challenges'
        order = "ORDER BY updated_at DESC, challenge_id DESC LIMIT $1"
        clauses, n = [], 2
        if by == "payer":
            clauses.append(f"payer = ${n}")
            n += 1
            if states:
                clauses.append(f"state = ANY(${n}::text[])")
                n += 1
        elif by == "states":
            clauses.append("state = s.state")
            n += 1
        if before:
            clauses.append(f"(updated_at, challenge_id) < (${n}, ${n + 1})")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        # Only the schema (a checked identifier) and placeholders are formatted in.
        if by == "states":
            inner = f"SELECT updated_at, challenge_id, record FROM {table}{where} {order}"  # noqa: S608
            statement = (
                f"SELECT c.record FROM unnest($2::text[]) AS s(state), LATERAL ({inner}) AS c "  # noqa: S608
                "ORDER BY c.updated_at DESC, c.challenge_id DESC LIMIT $1"
            )
        else:
            statement = f"SELECT record FROM {table}{where} {order}"  # noqa: S608
        self._finds[key] = statement
        return statement
