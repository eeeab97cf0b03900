"""Step 10: a PAID record becomes DELIVERED with its grant; the issuer is called once at a time.

An issuer with side effects (``exclusive``, the default: the ``callback``
issuer may create an account per purchase) is called only by the holder of the
record's delivery claim, a PAID -> PAID compare-and-set on a fresh attempt with
a short lease. The holder renews the lease while the issuer runs, so a holder
that crashed blocks the next request for ``DELIVERY_LEASE_SECONDS`` at most; a
request that finds the claim held waits for the holder's grant instead of
calling the issuer too. An issuer without side effects (``jwt``) needs no
claim: concurrent deliveries each sign, and the first compare-and-set wins.

A failing issuer leaves the record PAID, gives the claim back (the next retry
need not wait) and raises ``CredentialPending`` (500 with Retry-After).

A plan that sells calls credits the grant between issuing and PAID ->
DELIVERED, keyed by the paying challenge (``CreditStore.credit``): a crash in
between leaves the record PAID, and the retry or the reconciler that delivers
it credits again with the same key, which changes nothing. Exactly once.

A top-up is delivered to its grant as it is now, which may be late (the
reconciler, after a crash or an unknown outcome): a grant revoked or expired
meanwhile can never use the calls, so nothing is credited and the top-up moves
PAID -> OWED instead, its payment owed back to the buyer (``x402srv challenges
list --state OWED``, the console). A top-up credited before its grant was
revoked (a crash between crediting and DELIVERED) stays credited and is
delivered: its money went where it was paid to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import cast

from x402srv.access import moves
from x402srv.access.failpoints import failpoint
from x402srv.access.ids import uuid4_hex
from x402srv.access.records import ChallengeRecord, State
from x402srv.access.top_ups import grant_expiry, top_up_document
from x402srv.config.models import Plan
from x402srv.config.plans import CREDITS_OUTLIVE_TOKEN_SECONDS
from x402srv.errors import CredentialPending, ProblemError, StoreUnavailable, X402SrvError
from x402srv.interfaces import (
    Clock,
    CredentialIssuer,
    CreditStore,
    GrantRequest,
    IssuedCredential,
    TransitionApplied,
)
from x402srv.server.logs import fingerprint
from x402srv.server.metrics import Metrics
from x402srv.wire.offers import AccessGranted, OfferBuilder

__all__ = ["DELIVERY_LEASE_SECONDS", "Delivery"]

log = logging.getLogger("x402srv.access.pipeline")

#: A delivery claim lives this long unless its holder renews it (every third of it).
DELIVERY_LEASE_SECONDS = 3.0
#: Retry-After when the credential could not be issued yet.
RETRY_AFTER = 5


class Delivery:
    def __init__(
        self,
        mover: moves.Mover,
        issuer: CredentialIssuer,
        offers: OfferBuilder,
        plans: dict[str, Plan],
        metrics: Metrics,
        clock: Clock,
    ) -> None:
        self.mover = mover
        self.issuer = issuer
        self.offers = offers
        self.plans = plans
        self.metrics = metrics
        self.clock = clock
        self.exclusive = bool(getattr(issuer, "exclusive", True))

    async def answer(self, record: ChallengeRecord) -> AccessGranted | ChallengeRecord:
        """Steps 10-11 for a PAID record: its grant, or the record as it is now to follow."""
        delivered = await self.deliver(record)
        if delivered.state is State.DELIVERED:
            return self.offers.granted(delivered)
        return delivered

    async def deliver(self, record: ChallengeRecord, *, wait: bool = True) -> ChallengeRecord:
        """Issue, store the grant, PAID -> DELIVERED; the record as it is now.

        With an exclusive issuer a request that finds the claim held waits for
        the holder (``wait``) or leaves the record to it.
        """
        if record.top_up_of is not None:
            return await self._deliver_top_up(record)
        if self.exclusive:
            claimed = await self._claim(record)
            if claimed is None:
                return await self._await(record) if wait else record
            if claimed.state is not State.PAID:
                return claimed
            record = claimed
        credential = await self._issue(record)
        failpoint("after-grant")
        await self._credit(record, record.challenge_id, credential.expires_at)
        grant = self.offers.grant(record, credential)
        result = await self.mover.apply(
            moves.deliver(record, self.clock(), grant, claimed=self.exclusive)
        )
        if isinstance(result, TransitionApplied):
            self.metrics.grant_issued()
            return result.record
        return await self.mover.current(record, result)

    async def _deliver_top_up(self, record: ChallengeRecord) -> ChallengeRecord:
        """A top-up issues nothing: its calls go to its grant, then PAID -> DELIVERED.

        No delivery claim: crediting twice with the same key changes nothing,
        and the compare-and-set lets one delivery win.
        """
        assert record.top_up_of is not None
        grant = await self.mover.store.get_challenge(record.top_up_of)
        expires_at = (grant_expiry(grant) if grant is not None else None) or self.clock()
        unusable = await self._unusable(record, grant)
        if unusable is not None:
            return await self._owe(record, unusable)
        calls = await self._credit(record, record.top_up_of, expires_at)
        document = top_up_document(record, calls or 0, self.offers.explorer_url(record))
        result = await self.mover.apply(
            moves.deliver(record, self.clock(), document, claimed=False)
        )
        if isinstance(result, TransitionApplied):
            return result.record
        return await self.mover.current(record, result)

    async def _unusable(self, record: ChallengeRecord, grant: ChallengeRecord | None) -> str | None:
        """Why the top-up's grant can no longer use its calls; None when it can (or has them)."""
        assert record.top_up_of is not None
        expiry = grant_expiry(grant) if grant is not None else None
        if grant is None:
            why = f"its grant {record.top_up_of} is no longer in the store"
        elif grant.revoked_at is not None:
            why = f"its grant {grant.challenge_id} was revoked before the top-up was credited"
        elif expiry is not None and expiry <= self.clock():
            why = f"its grant {grant.challenge_id} expired before the top-up was credited"
        else:
            return None
        store = cast(CreditStore, self.mover.store)
        account = await store.get_credits(record.top_up_of)
        if account is not None and any(e.key == record.challenge_id for e in account.entries):
            return None  # credited before the grant went: delivered like any other
        return why

    async def _owe(self, record: ChallengeRecord, why: str) -> ChallengeRecord:
        """PAID -> OWED: nothing is credited; the payment waits to be paid back."""
        result = await self.mover.apply(moves.owe(record, self.clock(), why))
        if not isinstance(result, TransitionApplied):
            return await self.mover.current(record, result)
        log.warning(
            "challenge %s: top-up of %s %s on %s (tx %s) owed to the buyer: %s",
            record.challenge_id,
            record.amount,
            record.asset,
            record.network,
            record.tx_hash,
            why,
        )
        return result.record

    async def _credit(
        self, record: ChallengeRecord, grant_id: str, expires_at: float
    ) -> int | None:
        """Add the calls ``record`` paid for to ``grant_id``, once per paying challenge."""
        plan = self.plans.get(record.plan_id)
        # A challenge offered before its plan sold calls gets what the plan sells now.
        calls = record.calls if record.calls is not None else (plan.calls if plan else None)
        if calls is None:
            return None
        store = cast(CreditStore, self.mover.store)  # the registry refused a store without
        credited = await store.credit(
            grant_id,
            calls,
            key=record.challenge_id,
            now=self.clock(),
            keep_until=expires_at + CREDITS_OUTLIVE_TOKEN_SECONDS,
        )
        if credited.applied:
            self.metrics.credits_added(record.plan_id, calls)
        log.info(
            "challenge %s: %d calls credited to grant %s (balance %d)%s",
            record.challenge_id,
            calls,
            grant_id,
            credited.balance,
            "" if credited.applied else ", already before",
            extra={
                "challenge_id": record.challenge_id,
                "request_fp": fingerprint(record.request_id),
            },
        )
        failpoint("after-credit")
        return calls

    async def _issue(self, record: ChallengeRecord) -> IssuedCredential:
        """The issuer's credential; a claim held meanwhile is renewed until it answers."""
        renewing = asyncio.ensure_future(self._renew(record)) if self.exclusive else None
        try:
            return await self.issuer.issue(self._grant_request(record))
        except ProblemError:
            await self._give_back(record)
            raise
        except Exception as exc:
            await self._give_back(record)
            # Our own errors carry secret-free messages; anything else only by type.
            why = str(exc) if isinstance(exc, X402SrvError) else type(exc).__name__
            log.error(
                "challenge %s: credential issuer %s failed: %s",
                record.challenge_id,
                self.issuer.name,
                why,
            )
            raise CredentialPending(
                "the payment was settled but the access credential could not be issued yet; "
                "retry the same request to receive it",
                retry_after=RETRY_AFTER,
                extra={"challengeId": record.challenge_id, "txHash": record.tx_hash},
            ) from None
        finally:
            if renewing is not None:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing

    def _grant_request(self, record: ChallengeRecord) -> GrantRequest:
        assert record.tx_hash is not None
        assert record.payer is not None
        plan = self.plans.get(record.plan_id)
        return GrantRequest(
            request_id=record.request_id,
            challenge_id=record.challenge_id,
            plan_id=record.plan_id,
            resource_id=record.resource_id,
            tx_hash=record.tx_hash,
            payer=record.payer,
            token_ttl_seconds=plan.token_ttl_seconds if plan else 3600,
        )

    async def _claim(self, record: ChallengeRecord) -> ChallengeRecord | None:
        """The record claimed (or as it is now, if it moved on); None while another holds it."""
        payment = record.payment
        assert payment is not None
        now = self.clock()
        if payment.lease_until > now:
            return None
        claim = replace(payment, attempt_id=uuid4_hex(), lease_until=now + DELIVERY_LEASE_SECONDS)
        result = await self.mover.apply(moves.note(record, now, "issuing the credential", claim))
        if isinstance(result, TransitionApplied):
            return result.record
        current = await self.mover.current(record, result)
        return None if current.state is State.PAID else current

    async def _renew(self, record: ChallengeRecord) -> None:
        """Keep our claim alive while the issuer runs; stop once it is gone.

        Each renewal is a compare-and-set on our attempt (and a history entry, a
        few per slow callback), written without a log line.
        """
        assert record.payment is not None
        while True:
            await asyncio.sleep(DELIVERY_LEASE_SECONDS / 3)
            renewed = replace(record.payment, lease_until=self.clock() + DELIVERY_LEASE_SECONDS)
            move = moves.note(record, self.clock(), "issuing the credential", renewed)
            try:
                result = await self.mover.store.transition(move)
            except StoreUnavailable:
                continue
            if not isinstance(result, TransitionApplied):
                return

    async def _give_back(self, record: ChallengeRecord) -> None:
        """The issuer failed: end our claim so the next retry need not wait for it."""
        if not self.exclusive:
            return
        assert record.payment is not None
        ended = replace(record.payment, lease_until=self.clock())
        with contextlib.suppress(StoreUnavailable):  # else the claim simply runs out
            await self.mover.apply(
                moves.note(record, self.clock(), "credential issuer failed", ended)
            )

    async def _await(self, record: ChallengeRecord) -> ChallengeRecord:
        """Another request is issuing this credential: wait for it, or for its claim to lapse."""
        delay = 0.01
        while True:
            current = await self.mover.current(record)
            if current.state is not State.PAID:
                return current
            assert current.payment is not None
            if current.payment.lease_until <= self.clock():
                return current  # the claim ran out (or was given back): take it over
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
