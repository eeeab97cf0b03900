"""Top-ups: a payment that adds its plan's calls to a grant the buyer holds, token unchanged.

A top-up is a challenge of its own (its own ``challengeId``, ``requestId``,
payment claim and settlement, every rule of docs/protocol/flow.md), bound when it is
created to the grant it tops up (``ChallengeRecord.top_up_of``: the grant's
challengeId, the token's ``jti``), so a payment can never be credited to
another grant. The buyer names the grant with its proof of ownership:

- at ``/x402/access``: ``{"topUp": "<the grant's requestId>", "planId"?, "requestId"?}``
  (the grant's requestId is the buyer's secret, as for fetching the grant);
- through the gateway: the grant's own bearer token, sent with the payment
  that answers a ``CREDITS_EXHAUSTED`` 402 (a standard x402 client does that
  by itself: it repeats the request, headers included, with ``PAYMENT-SIGNATURE``).

Delivering a top-up issues no credential: ``credit`` adds the calls to the
grant keyed by the top-up's challenge (once, however often delivery runs after
a crash) and the record becomes DELIVERED holding ``top_up_document``, which
every replay of the top-up gets back. It holds no token: a top-up's payment is
public once settled, and a replay of it must not hand out the grant's token.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping
from typing import Any

from x402srv.access.records import ChallengeRecord, State
from x402srv.config.models import Plan
from x402srv.errors import ChallengeExpired, GrantRevoked, InvalidRequest
from x402srv.interfaces import Store

__all__ = ["find_grant", "grant_expiry", "top_up_document"]


def grant_expiry(record: ChallengeRecord) -> float | None:
    """When the grant's token expires (its AccessGrant's ``expiresAt``), if it has one."""
    text = (record.grant or {}).get("expiresAt")
    if not isinstance(text, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


async def find_grant(
    store: Store,
    plans: Mapping[str, Plan],
    *,
    request_id: str | None = None,
    challenge_id: str | None = None,
    plan_id: str | None,
    now: float,
) -> ChallengeRecord:
    """The grant a top-up names, checked before anything is stored or paid.

    Refused (``InvalidRequest``): no delivered purchase by that name, a top-up
    named instead of a grant, a plan that sells no calls, another plan than the
    grant's. An expired grant is ``ChallengeExpired`` and a revoked one
    ``GrantRevoked``: its token opens nothing any more, so calls added to it
    could never be used.
    """
    if request_id is not None:
        grant = await store.get_by_request_id(request_id)
    else:
        assert challenge_id is not None
        grant = await store.get_challenge(challenge_id)
    if grant is None or grant.state is not State.DELIVERED or grant.top_up_of is not None:
        raise InvalidRequest("topUp names no delivered purchase on this server")
    if grant.revoked_at is not None:
        # Its token is refused everywhere: calls added to it could never be used.
        raise GrantRevoked("the grant was revoked by the seller; it cannot be topped up")
    plan = plans.get(grant.plan_id)
    if plan is None or plan.calls is None:
        raise InvalidRequest(f"the grant's plan {grant.plan_id!r} sells no calls to top up")
    if plan_id is not None and plan_id != grant.plan_id:
        raise InvalidRequest(
            f"a grant of plan {grant.plan_id!r} is topped up with that plan, not {plan_id!r}"
        )
    expiry = grant_expiry(grant)
    if expiry is not None and expiry <= now:
        raise ChallengeExpired("the grant has expired; buy a new one instead of topping it up")
    return grant


def top_up_document(record: ChallengeRecord, calls: int, explorer: str | None) -> dict[str, Any]:
    """What a delivered top-up answers (and every replay of it): no token, the calls it added."""
    assert record.tx_hash is not None
    assert record.top_up_of is not None
    document: dict[str, Any] = {
        "type": "TopUp",
        "challengeId": record.challenge_id,
        "requestId": record.request_id,
        "planId": record.plan_id,
        "resourceId": record.resource_id,
        "grantChallengeId": record.top_up_of,
        "calls": calls,
        "txHash": record.tx_hash,
        "network": record.network,
    }
    if explorer:
        document["explorerUrl"] = explorer
    return document
