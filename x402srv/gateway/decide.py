"""What the gateway does with one request under a route; no HTTP I/O here.

In this order, the first that applies decides:

1. ``Authorization`` present: the token must verify (``x402srv.tokens.admission``,
   the same 401 bodies as every guard) and its plan must be one of the
   route's -> ``Forward`` with the token's claims; else 401. A request that
   carries a token is never charged, even if it also carries a payment. If
   the plan is metered (``calls``, ``rate_limit``) the call spends the route's
   ``cost`` first (``x402srv.usage.credits``): a full rate window is 429, spent
   credits are ``OutOfCredits``: the 402 offer of the token's plan with the
   problem code ``CREDITS_EXHAUSTED``. A token of a plan that sells calls
   sent WITH a ``PAYMENT-SIGNATURE`` (the official client paying that 402 and
   repeating the request) is a *top-up*: the payment is settled by the access
   pipeline as a top-up of the token's grant (``x402srv.access.top_ups``; once per
   payment, however often it is replayed), then the call is metered and
   forwarded, and the buyer keeps its token. A payment for another plan gets
   the token plan's offer again, nothing settled.
2. ``PAYMENT-SIGNATURE`` present (the official x402 client retrying the SAME
   request after our 402): the paid plan (``accepted.extra.planId``) must be
   one of the route's (else the route's 402 again, nothing settled); then the
   access pipeline settles it exactly as ``POST /x402/access`` would (same
   steps, same store, same idempotency: a replay of the same payment returns
   the same grant, never a second transfer) -> ``Forward`` with the fresh
   token's claims and the grant, so the buyer gets the upstream's answer plus
   ``PAYMENT-RESPONSE`` and the token to reuse (``X-X402-Access-Token``).
   A replay of a payment whose grant can no longer open anything answers as
   the token would: expired -> the route's 402 (pay again), signed with a key
   the seller has retired -> 401.
3. ``SIGN-IN-WITH-X`` (docs/sign-in-with-x.md), no token, no payment: a
   wallet that holds a live grant of one of the route's plans, proven by the
   message the route's 402 declared, gets ``Forward`` with that grant's token
   and grant, as after its payment (the same headers); a wallet without one
   gets the route's 402. A bad sign-in is refused (``x402srv.access.sign_in``).
4. None of these: the route's 402 offer, built from the pipeline's discovery offer
   (each option of each plan the route accepts, in the route's order), so a
   standard x402 client pays and retries with no custom code. Like every 402
   it carries a fresh random ``requestId`` in each requirement's ``extra``
   (stored nowhere): the purchase takes it, and only a retry that echoes it
   gets the grant again (docs/design.md, "Who gets a grant"); a payment copied
   from the chain is never forwarded upstream. It counts
   against the client's unpaid-request limit (429 RATE_LIMITED), as does a
   payment under 1 or 2 or a sign-in under 3 that fails.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from x402srv.access.ids import uuid4_str
from x402srv.access.pipeline import AccessPipeline
from x402srv.config.models import Config
from x402srv.config.routes import RouteConfig
from x402srv.errors import (
    CreditsExhausted,
    InternalError,
    InvalidToken,
    RevocationsUnavailable,
    SiwxInvalid,
    SiwxRejected,
    TokenExpired,
)
from x402srv.tokens import admission
from x402srv.tokens.verify import AccessClaims, TokenVerifier
from x402srv.usage.credits import Meter, Usage
from x402srv.wire.bazaar import bazaar_extension
from x402srv.wire.offer_receipt import OFFER_RECEIPT
from x402srv.wire.offers import AccessGranted, PaymentOffer, with_request_id
from x402srv.wire.protocol import AccessBody, decode_payment_header, encode_header
from x402srv.wire.siwx import SIGN_IN_WITH_X, route_scope

__all__ = ["Forward", "Gateway", "OutOfCredits", "narrowed_offer"]

log = logging.getLogger("x402srv.gateway")

#: Gateway purchases are the same purchases as at /x402/access: their tokens open
#: every route their plan opens, so they name no particular resource.
_RESOURCE_ID = "default"


@dataclass(frozen=True, slots=True)
class Forward:
    """Forward the request upstream as this buyer; ``granted`` is set on a paid retry."""

    route: RouteConfig
    claims: AccessClaims
    granted: AccessGranted | None = None
    usage: Usage | None = None  # a metered call: its RateLimit fields, its refund


@dataclass(frozen=True, slots=True)
class OutOfCredits:
    """The token's grant has no credits left: its plan's 402, with the RateLimit fields."""

    offer: PaymentOffer
    headers: dict[str, str]


def narrowed_offer(
    pipeline: AccessPipeline,
    plans: Sequence[str],
    *,
    resource: dict[str, Any],
    error: str,
    members: dict[str, Any] | None = None,
    extensions: dict[str, Any] | None = None,
    siwx_scope: str | None = None,
) -> PaymentOffer:
    """The discovery offer narrowed to ``plans`` (in their order), with a fresh requestId.

    Every 402 that is not a challenge is built here: the gateway's routes and the
    MCP gateway's payment-required results (``x402srv.gateway.mcp``), so a buyer
    pays the same requirements whichever door it came through. ``siwx_scope``:
    what signing in opens (docs/sign-in-with-x.md); without it none is declared.
    """
    discovery = pipeline.offers.catalog.body
    by_plan: dict[str, list[dict[str, Any]]] = {}
    for accept in discovery["accepts"]:  # a plan paid on several networks: each option
        by_plan.setdefault(accept["extra"]["planId"], []).append(accept)
    required: dict[str, Any] = {
        "x402Version": 2,
        "error": error,
        "resource": resource,
        "accepts": with_request_id(
            (accept for plan_id in plans for accept in by_plan[plan_id]), uuid4_str()
        ),
    }
    extensions = {**pipeline.offers.extensions(), **(extensions or {})}
    signer = pipeline.offers.signer
    if signer is not None:  # signed offers (docs/offer-receipt.md)
        extensions[OFFER_RECEIPT] = signer.offers(resource["url"], required["accepts"])
    siwx = pipeline.offers.siwx
    if siwx is not None and siwx_scope is not None:
        extensions[SIGN_IN_WITH_X] = siwx.declaration(
            scope=siwx_scope,
            uri=resource["url"],
            networks=tuple(accept["network"] for accept in required["accepts"]),
            now=pipeline.clock(),
        )
    required["extensions"] = extensions
    body = {
        **required,
        "plans": [p for p in discovery["plans"] if p["planId"] in plans],
        "walletAddress": discovery["walletAddress"],
        "chainId": discovery["chainId"],
        "network": discovery["network"],
        **({"networks": discovery["networks"]} if "networks" in discovery else {}),
        **(members or {}),
    }
    return PaymentOffer(body=body, header=encode_header(required))


class Gateway:
    """The routes of one config, matched on decoded path segments (longest prefix wins)."""

    def __init__(
        self,
        config: Config,
        pipeline: AccessPipeline,
        verifier: TokenVerifier,
        meter: Meter | None = None,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.verifier = verifier
        self.meter = meter
        self.routes = sorted(config.routes, key=lambda r: len(r.prefix_segments), reverse=True)
        self._plans = {
            route.prefix: tuple(route.plans or config.seller_plan_ids) for route in config.routes
        }

    def match(self, segments: Sequence[str]) -> RouteConfig | None:
        """The route whose prefix segments start ``segments`` (``/api`` never matches ``/apix``)."""
        for route in self.routes:
            prefix = route.prefix_segments
            if tuple(segments[: len(prefix)]) == prefix:
                return route
        return None

    def plans(self, route: RouteConfig) -> tuple[str, ...]:
        return self._plans[route.prefix]

    def offer(
        self,
        route: RouteConfig,
        resource_url: str,
        error: str | None = None,
        *,
        plans: tuple[str, ...] | None = None,
        members: dict[str, Any] | None = None,
    ) -> PaymentOffer:
        """The route's 402: the discovery offer narrowed to the route's plans (or ``plans``).

        ``members`` are added to the JSON body (not to ``PAYMENT-REQUIRED``).
        Each answer has a requestId of its own, as the discovery 402 has.
        """
        return narrowed_offer(
            self.pipeline,
            plans or self.plans(route),
            resource=_resource(route, resource_url, self.config.seller.agent_description),
            error=error
            or "Payment required: pay one of the accepted requirements and repeat this "
            "request with PAYMENT-SIGNATURE",
            members=members,
            # what facilitators list (docs/bazaar.md)
            extensions=bazaar_extension(route.discovery) if route.discovery is not None else None,
            siwx_scope=route_scope(route.prefix),
        )

    async def decide(
        self,
        route: RouteConfig,
        *,
        authorization: Sequence[str],
        payment_signature: str | None,
        resource_url: str,
        client: str | None = None,
        sign_in: str | None = None,
    ) -> Forward | PaymentOffer | OutOfCredits:
        """See the module docstring; refusals are raised as ``ProblemError``."""
        if authorization:
            return await self._with_token(
                route, authorization, resource_url, payment_signature, client
            )
        if payment_signature is not None:
            return await self._paid(route, payment_signature, resource_url, client)
        if sign_in is not None:
            signed_in = await self._signed_in(route, sign_in, resource_url, client)
            if signed_in is not None:
                return signed_in
        await self.pipeline.limit_unpaid(client)
        return self.offer(route, resource_url)

    async def _signed_in(
        self, route: RouteConfig, header: str, resource_url: str, client: str | None
    ) -> Forward | OutOfCredits | None:
        """3: the wallet's live grant of one of the route's plans, forwarded as after a payment."""
        sign_in = self.pipeline.sign_in
        try:
            signed = await sign_in.check(header, scope=route_scope(route.prefix), uri=resource_url)
        except (SiwxInvalid, SiwxRejected):
            await self.pipeline.limit_failed(client)
            raise
        record = await sign_in.grant(signed, self.plans(route), _RESOURCE_ID)
        if record is None:
            return None
        await sign_in.use(signed)  # once, across instances: 409 for a replay
        granted = self.pipeline.offers.granted(record)
        try:
            claims = await self.verifier.verify(granted.grant["accessToken"])
        except (TokenExpired, InvalidToken):
            return None  # expired since, or signed with a retired key: the route's 402
        return await self._metered(route, resource_url, claims, granted)

    async def _with_token(
        self,
        route: RouteConfig,
        authorization: Sequence[str],
        resource_url: str,
        payment_signature: str | None = None,
        client: str | None = None,
    ) -> Forward | PaymentOffer | OutOfCredits:
        result = await admission.admit(self.verifier, authorization)
        if not isinstance(result, AccessClaims):
            raise result
        if result.plan_id not in self.plans(route):
            raise InvalidToken(
                f"A token for plan {result.plan_id!r} does not open {route.prefix}; "
                f"it needs one of: {', '.join(self.plans(route))}."
            )
        plan = self.config.plan_map.get(result.plan_id)
        if payment_signature is not None and plan is not None and plan.calls is not None:
            return await self._top_up(route, result, payment_signature, resource_url, client)
        return await self._metered(route, resource_url, result)

    async def _top_up(
        self,
        route: RouteConfig,
        claims: AccessClaims,
        payment_signature: str,
        resource_url: str,
        client: str | None,
    ) -> Forward | PaymentOffer | OutOfCredits:
        """The token's grant topped up with this payment, then the call metered as usual."""
        payment = decode_payment_header(payment_signature)
        if payment.extra_str("planId") != claims.plan_id:
            return self.offer(
                route,
                resource_url,
                error=f"a grant of plan {claims.plan_id!r} is topped up by paying that plan",
                plans=(claims.plan_id,),
            )
        result = await self.pipeline.access(
            AccessBody(None, None, _RESOURCE_ID),
            payment,
            client=client,
            top_up_of=claims.challenge_id,
        )
        if isinstance(result, PaymentOffer):  # (only without a payment; kept total)
            return result
        return await self._metered(route, resource_url, claims, result)

    def _out_of_credits(
        self, route: RouteConfig, resource_url: str, claims: AccessClaims, spent: CreditsExhausted
    ) -> OutOfCredits:
        """The offer of the token's plan again: paying it tops up the same grant."""
        problem = spent.to_problem()
        offer = self.offer(
            route,
            resource_url,
            error="credits exhausted: pay again to top up this grant (keep sending its token)",
            plans=(claims.plan_id,),
            members={k: v for k, v in problem.items() if k != "type"},
        )
        return OutOfCredits(offer, spent.headers())

    async def _paid(
        self, route: RouteConfig, payment_signature: str, resource_url: str, client: str | None
    ) -> Forward | PaymentOffer | OutOfCredits:
        payment = decode_payment_header(payment_signature)
        plan_id = payment.extra_str("planId")
        if plan_id not in self.plans(route):
            # Nothing is tried: the route's 402 again, counted as any unpaid 402 is.
            await self.pipeline.limit_unpaid(client)
            return self.offer(
                route,
                resource_url,
                error=f"plan {plan_id!r} does not open this route; pay one of the accepted "
                "requirements",
            )
        result = await self.pipeline.access(
            AccessBody(None, None, _RESOURCE_ID), payment, client=client
        )
        if isinstance(result, PaymentOffer):  # (only without a payment; kept total)
            return result
        try:
            claims = await self.verifier.verify(result.grant["accessToken"])
        except TokenExpired:
            # A replay of an old payment: what it bought is over, like its token.
            return self.offer(
                route,
                resource_url,
                error="the access this payment bought has expired; pay again for more",
            )
        except InvalidToken:
            # A replay whose stored token the seller's keys no longer accept (rotated out).
            raise InvalidToken(
                "The access token bought with this payment is no longer accepted by this "
                "server (its signing key was retired)."
            ) from None
        except RevocationsUnavailable:
            raise  # no revocation list read yet: 503, never forwarded; a retry gets the same grant
        except Exception:
            # Our own issuer's token failing any other way is a bug, not the buyer's fault.
            log.exception("the token of %s does not verify", result.grant["challengeId"])
            raise InternalError() from None
        return await self._metered(route, resource_url, claims, result)

    async def _metered(
        self,
        route: RouteConfig,
        resource_url: str,
        claims: AccessClaims,
        granted: AccessGranted | None = None,
    ) -> Forward | OutOfCredits:
        """The call spends the route's cost of a metered plan (the paying call too)."""
        if self.meter is None:
            return Forward(route, claims, granted)
        try:
            usage = await self.meter.spend(claims, route.reserve)  # a reservation if by use
        except CreditsExhausted as spent:
            return self._out_of_credits(route, resource_url, claims, spent)
        return Forward(route, claims, granted, usage)


def _resource(route: RouteConfig, url: str, fallback: str) -> dict[str, Any]:
    """The 402's resource: the route's discovery metadata first, then its description."""
    discovery = route.discovery
    resource = {
        "url": url,
        "description": (discovery.description if discovery else None)
        or route.description
        or fallback,
    }
    if discovery is not None and discovery.mime_type is not None:
        resource["mimeType"] = discovery.mime_type
    return resource
