"""Put the gateway's routes on the x402srv app: ``install_gateway(app, pipeline)``.

One Sanic route pair per ``[[routes]]`` prefix (``<prefix>`` and
``<prefix>/<rest:path>``, streaming, every method but OPTIONS, which stays
with CORS). x402srv's own routes (``/.well-known/*``, ``/x402/access``, the
A2A route) are static and win over these, so they are never forwarded. Every
request that lands here is re-read by ``x402srv.server.paths.gateway_segments`` and
matched again by ``Gateway.match`` on its decoded segments: Sanic's choice of
route only decides that the gateway looks at it, never which route applies.

One ``httpx.AsyncClient`` per worker carries all upstream traffic: opened in
``before_server_start``, closed in ``after_server_stop``. It trusts no proxy
environment variables, follows no redirects (the client sees the upstream's
3xx), sends none of httpx's default headers (the upstream sees the
buyer's ``Accept-Encoding``, not ours, so bodies pass through undecoded), and
keeps no cookie of one buyer's call for another's (``upstream_client``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from sanic import Request, Sanic
from sanic.response import HTTPResponse

from x402srv.access.pipeline import AccessPipeline
from x402srv.config.routes import RouteConfig
from x402srv.errors import NotFound, ProblemError
from x402srv.gateway.decide import Forward, Gateway, OutOfCredits
from x402srv.gateway.forward import forward
from x402srv.gateway.metered import UsageCall
from x402srv.gateway.trailers import capture_upstream_trailers
from x402srv.gateway.upstreams import upstream_client
from x402srv.server.paths import gateway_segments
from x402srv.server.problems import problem_response
from x402srv.server.responses import offer_response
from x402srv.tokens.verify import RevocationSource, TokenVerifier
from x402srv.usage.credits import Meter, Usage
from x402srv.usage.unpaid_limit import client_of
from x402srv.wire.offers import PaymentOffer
from x402srv.wire.protocol import encode_header

__all__ = ["ACCESS_TOKEN_HEADER", "GRANT_HEADER", "METHODS", "TOP_UP_HEADER", "install_gateway"]

METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
#: Paid-retry response headers: the token to reuse, and the whole AccessGrant (base64 JSON).
ACCESS_TOKEN_HEADER: Final = "X-X402-Access-Token"  # noqa: S105 - a header name
GRANT_HEADER: Final = "X-X402-Grant"
#: A paid retry that topped a grant up: its receipt (base64 JSON ``TopUp``, no token).
TOP_UP_HEADER: Final = "X-X402-Top-Up"


def _grant_headers(decision: Forward) -> dict[str, str]:
    granted = decision.granted
    if granted is None:
        return {}
    if granted.grant.get("type") == "TopUp":  # the buyer keeps its token: no new one
        return {
            "PAYMENT-RESPONSE": granted.payment_response,
            TOP_UP_HEADER: encode_header(granted.grant),
            "Cache-Control": "no-store",
        }
    return {
        "PAYMENT-RESPONSE": granted.payment_response,
        ACCESS_TOKEN_HEADER: str(granted.grant["accessToken"]),
        GRANT_HEADER: encode_header(granted.grant),
        "Cache-Control": "no-store",  # it carries a bearer token
    }


async def _refund(
    meter: Meter | None, usage: Usage, route: RouteConfig, *, failed: bool, sent: bool
) -> Usage:
    """A metered call the upstream failed gets its credits back (``refund_on_5xx``).

    So does one none of whose bytes went out, whatever ``refund_on_5xx`` says: the
    upstream never saw it (docs/selling-calls.md, "Charging by use").
    """
    if meter is not None and (not sent or (failed and route.refund_on_5xx)):
        return await meter.refund(usage)
    return usage


def install_gateway(
    app: Sanic[Any, Any],
    pipeline: AccessPipeline,
    revocations: RevocationSource | None = None,
) -> None:
    """Add the ``[[routes]]`` of ``pipeline.config`` to ``app`` (nothing if there are none).

    ``revocations``: the store's revocation list (``x402srv.tokens.revocation``), so a
    revoked grant's token stops opening the routes (and spends none of its credits).
    """
    config = pipeline.config
    if not config.routes:
        return
    meter = None
    if config.meters_calls:  # the pipeline's store, which credits the grants it delivers
        meter = Meter(
            pipeline.store, config.plan_map, clock=pipeline.clock, access_url=config.access_url
        )
    verifier = TokenVerifier.from_config(config, clock=pipeline.clock, revocations=revocations)
    gateway = Gateway(config, pipeline, verifier, meter)
    if any(route.usage is not None and route.usage.source == "trailer" for route in config.routes):
        capture_upstream_trailers()  # httpx drops trailers otherwise (x402srv.gateway.trailers)

    @app.before_server_start
    async def open_gateway_client(app: Sanic[Any, Any]) -> None:
        app.ctx.gateway_client = upstream_client()  # (shared by every buyer's calls: keeps nothing)

    @app.after_server_stop
    async def close_gateway_client(app: Sanic[Any, Any]) -> None:
        await app.ctx.gateway_client.aclose()

    async def gateway_route(request: Request, rest: str = "") -> HTTPResponse | None:
        route = gateway.match(gateway_segments(request.path))
        if route is None:  # (Sanic matched a prefix, so this only guards against drift)
            raise NotFound(f"no route for {request.path}")
        decision = await gateway.decide(
            route,
            authorization=request.headers.getall("authorization", []),
            payment_signature=request.headers.get("payment-signature"),
            resource_url=config.seller.agent_url + request.path,
            client=client_of(request),
            sign_in=request.headers.get("sign-in-with-x"),
        )
        if isinstance(decision, PaymentOffer):
            return offer_response(decision)
        if isinstance(decision, OutOfCredits):
            response = offer_response(decision.offer)
            response.headers.update(decision.headers)
            return response
        extra = _grant_headers(decision)
        if decision.usage is not None and route.usage is not None and meter is not None:
            call = UsageCall(meter, route, decision.usage, decision.claims.challenge_id)
            return await _by_use(request, route, decision, call, extra)
        usage = decision.usage

        sent = False

        async def metered(status: int, _headers: object = None) -> dict[str, str]:
            """The RateLimit fields, after giving the credits back for a failed call."""
            nonlocal usage
            if usage is None:
                return {}
            usage = await _refund(meter, usage, route, failed=status >= 500, sent=sent)
            return usage.headers()

        def sending() -> None:
            nonlocal sent
            sent = True

        try:
            status = await forward(
                app.ctx.gateway_client,
                request,
                route,
                decision.claims,
                extra_response_headers=extra,
                on_status=metered,
                sending=sending if usage is not None else None,
            )
        except ProblemError as err:
            # A paid retry whose upstream failed still hands the buyer its token.
            response = problem_response(err)
            response.headers.update({**extra, **await metered(err.status)})
            return response
        except asyncio.CancelledError:
            # The buyer left: a call none of which went out costs nothing (``_refund``).
            if not sent:
                await metered(0)
            raise
        if status is None:  # the upstream broke in the middle of its answer
            await metered(500)
        return None

    async def _by_use(
        request: Request,
        route: RouteConfig,
        decision: Forward,
        call: UsageCall,
        extra: dict[str, str],
    ) -> HTTPResponse | None:
        """A call charged by use: its reservation settled once, whatever happens to it."""
        try:
            try:
                status = await forward(
                    app.ctx.gateway_client,
                    request,
                    route,
                    decision.claims,
                    extra_response_headers=extra,
                    on_status=call.answered,
                    watch=call.watch,
                    tail=call.ended,
                    sending=call.sending,
                )
            except ProblemError as err:
                response = problem_response(err)
                response.headers.update({**extra, **await call.failed(err.status)})
                return response
            if status is None:  # the upstream broke in the middle of its answer
                await call.failed(500)
        finally:
            if not call.settled:
                # The buyer went away mid-answer (or the handler failed): the
                # settlement still happens, and a cancellation does not stop it.
                await asyncio.shield(call.abandoned())
        return None

    for index, route in enumerate(config.routes):
        base = "" if route.prefix == "/" else route.prefix
        for suffix, uri in enumerate((base or "/", f"{base}/<rest:path>")):
            app.add_route(
                gateway_route,
                uri,
                methods=METHODS,
                stream=True,
                name=f"gateway_{index}_{suffix}",
            )
