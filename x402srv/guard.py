"""Token guard for the seller's Sanic routes (docs/protocol/wire.md, "Access tokens").

Two ways to put it in front of a route, both checking the same thing:

- ``@require_access(verifier)`` on one handler;
- ``access_guard(app, verifier, paths=["/api"])``: request middleware for every
  route under some path prefixes (or where a predicate says so).

A request passes with ``Authorization: Bearer <jwt>`` (scheme case-insensitive)
that the ``TokenVerifier`` accepts; the verified ``AccessClaims`` are then at
``request.ctx.x402`` (read them typed with ``access_claims(request)``). Anything
else gets 401 problem details (``INVALID_TOKEN`` or ``TOKEN_EXPIRED``) with
``WWW-Authenticate: Bearer error="invalid_token"``. Keys that cannot be fetched
(a JWKS source whose endpoint is down) answer 503 ``KEY_SOURCE_UNAVAILABLE``; a
verifier that breaks in an unexpected way answers 500 ``INTERNAL_ERROR`` without
saying why (it is logged). That decision is ``x402srv.tokens.admission``'s, shared with
the ASGI middleware and the gateway, so every integration answers alike.

A path prefix is compared with the raw path, its percent-decoded and its
dot-segment-normalised forms and the matched route: if any of them is under a
guarded prefix the request is guarded (``x402srv.server.paths``), so an encoded
``/api%2Fdata`` or ``/public/../api`` cannot slip past.

The verifier is built before the guard (``TokenVerifier.from_config``), and a
missing or unusable key raises ``ConfigError`` there: the app fails at start-up
instead of refusing every request.

Given a ``meter`` (``x402srv.usage.credits.Meter``), both meter the calls of plans
that sell calls or limit them, as the gateway does: ``cost`` credits (a number
or a function of the request) before the handler runs, 402
``CREDITS_EXHAUSTED`` or 429 with ``Retry-After`` when refused, the
``RateLimit-Policy`` and ``RateLimit`` fields on the answer, and the credits
back when it is a 5xx (``Meter.refund_on_5xx``). The ``Usage`` is at
``request.ctx.x402_usage``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from sanic import Request, Sanic
from sanic.response import BaseHTTPResponse, HTTPResponse

from x402srv.errors import ProblemError
from x402srv.server.paths import guarded_prefixes, is_guarded
from x402srv.server.problems import problem_response
from x402srv.tokens import admission
from x402srv.tokens.verify import AccessClaims, TokenVerifier
from x402srv.usage.credits import Meter, Usage

__all__ = [
    "CLAIMS_ATTRIBUTE",
    "DEFAULT_PRIORITY",
    "USAGE_ATTRIBUTE",
    "PathPredicate",
    "RequestCost",
    "access_claims",
    "access_guard",
    "require_access",
]

#: The attribute of ``request.ctx`` that holds the verified ``AccessClaims``.
CLAIMS_ATTRIBUTE: Final = "x402"
#: The attribute of ``request.ctx`` that holds a metered call's ``Usage``.
USAGE_ATTRIBUTE: Final = "x402_usage"

#: Request middleware priority: above Sanic's default 0, so the seller's own
#: request middleware never sees an unauthenticated request to a guarded path.
DEFAULT_PRIORITY: Final = 100

PathPredicate = Callable[[Request], bool]
RequestCost = Callable[[Request], int]

P = ParamSpec("P")
R = TypeVar("R")


def access_claims(request: Request) -> AccessClaims:
    """The claims the guard attached; a ``LookupError`` means the route is not guarded."""
    claims = getattr(request.ctx, CLAIMS_ATTRIBUTE, None)
    if not isinstance(claims, AccessClaims):
        raise LookupError("no verified access token on this request (is the route guarded?)")
    return claims


async def _admit(
    request: Request,
    verifier: TokenVerifier,
    meter: Meter | None = None,
    cost: int | RequestCost = 1,
) -> HTTPResponse | None:
    """None when the request may go on (claims, and usage, attached), else the response."""
    result = await admission.admit(verifier, request.headers.getall("authorization", []))
    claims = _attach(request, result)
    if isinstance(claims, HTTPResponse):
        return claims
    if meter is not None:
        try:
            usage = await meter.spend(claims, cost(request) if callable(cost) else cost)
        except ProblemError as err:
            return problem_response(err)
        request.ctx.x402_usage = usage
    return None


def _attach(request: Request, result: AccessClaims | ProblemError) -> AccessClaims | HTTPResponse:
    """Admitted claims go on the request and come back; a refusal comes back as its answer."""
    if not isinstance(result, AccessClaims):
        return problem_response(result)
    request.ctx.x402 = result
    return result


async def _settle_usage(meter: Meter, request: Request, response: BaseHTTPResponse | None) -> None:
    """The answer of a metered call gets its RateLimit fields; a 5xx gets its credits back."""
    usage: Usage | None = getattr(request.ctx, USAGE_ATTRIBUTE, None)
    if usage is None:
        return
    if meter.refunds(response.status if response is not None else 500):
        usage = await meter.refund(usage)
    if response is not None:
        response.headers.update(usage.headers())


def require_access(
    verifier: TokenVerifier,
    *,
    meter: Meter | None = None,
    cost: int | RequestCost = 1,
) -> Callable[
    [Callable[Concatenate[Request, P], Coroutine[Any, Any, R]]],
    Callable[Concatenate[Request, P], Coroutine[Any, Any, R | HTTPResponse]],
]:
    """Decorate one async handler so it runs only for a valid access token."""

    def decorate(
        handler: Callable[Concatenate[Request, P], Coroutine[Any, Any, R]],
    ) -> Callable[Concatenate[Request, P], Coroutine[Any, Any, R | HTTPResponse]]:
        if meter is None:
            # Every call of a guarded route runs this: ``admit`` awaited here rather than
            # through ``_admit`` saves a coroutine (its frame, its allocation) per call.

            @functools.wraps(handler)
            async def guarded(
                request: Request, /, *args: P.args, **kwargs: P.kwargs
            ) -> R | HTTPResponse:
                claims = await admission.admit(
                    verifier, request.headers.getall("authorization", [])
                )
                if isinstance(admitted := _attach(request, claims), HTTPResponse):
                    return admitted
                return await handler(request, *args, **kwargs)

            return guarded
        metering: Meter = meter

        @functools.wraps(handler)
        async def metered(
            request: Request, /, *args: P.args, **kwargs: P.kwargs
        ) -> R | HTTPResponse:
            refusal = await _admit(request, verifier, metering, cost)
            if refusal is not None:
                return refusal
            try:
                answer = await handler(request, *args, **kwargs)
            except BaseException:
                await _settle_usage(metering, request, None)
                raise
            await _settle_usage(
                metering, request, answer if isinstance(answer, HTTPResponse) else None
            )
            return answer

        return metered

    return decorate


def _prefix_predicate(paths: Sequence[str]) -> PathPredicate:
    prefixes = guarded_prefixes(paths)

    def guarded(request: Request) -> bool:
        # The raw path is what Sanic routes on; the matched route is checked too,
        # so the guard fails closed if the two ever disagree.
        route = None if request.route is None else "/" + request.route.path.lstrip("/")
        return is_guarded(request.path, prefixes, also=route)

    return guarded


def access_guard(
    app: Sanic[Any, Any],
    verifier: TokenVerifier,
    *,
    paths: str | Sequence[str] | PathPredicate,
    priority: int = DEFAULT_PRIORITY,
    meter: Meter | None = None,
    cost: int | RequestCost = 1,
) -> Callable[[Request], Coroutine[Any, Any, HTTPResponse | None]]:
    """Guard every request whose path is under one of ``paths`` (or where ``paths(request)``).

    A prefix covers itself and what lies below it (``/api`` covers ``/api`` and
    ``/api/x``, not ``/apix``). With a ``meter`` the guarded calls are metered
    (see the module docstring). Returns the registered request middleware.
    """
    if isinstance(paths, str):
        paths = [paths]
    predicate = paths if callable(paths) else _prefix_predicate(paths)

    async def x402_access_guard(request: Request) -> HTTPResponse | None:
        if not predicate(request):
            return None
        if meter is None:  # as in ``require_access``: one coroutine fewer per call
            claims = await admission.admit(verifier, request.headers.getall("authorization", []))
            admitted = _attach(request, claims)
            return admitted if isinstance(admitted, HTTPResponse) else None
        return await _admit(request, verifier, meter, cost)

    app.on_request(x402_access_guard, priority=priority)
    if meter is not None:

        async def x402_metered_answer(request: Request, response: BaseHTTPResponse) -> None:
            await _settle_usage(meter, request, response)

        app.register_middleware(x402_metered_answer, "response")
    return x402_access_guard
