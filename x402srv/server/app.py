"""``create_app(config) -> Sanic``: routes translate HTTP to the pipeline and back.

No route chooses a status code from business logic: the pipeline returns an
offer (402), a grant (200) or raises a ``ProblemError`` which one handler turns
into problem+json. Plugins are opened in ``before_server_start`` and closed in
``after_server_stop``, once per worker process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from email.utils import formatdate
from typing import Any

from sanic import Request, Sanic
from sanic.exceptions import SanicException
from sanic.response import BaseHTTPResponse, HTTPResponse
from sanic_ext import Extend
from sanic_ext.extensions.http.extension import HTTPExtension

from x402srv.a2a import A2AEndpoint, A2AService, sniff_envelope
from x402srv.a2a.versions import VERSION_HEADER
from x402srv.access.build import build_pipeline
from x402srv.access.pipeline import AccessPipeline, AccessRequest
from x402srv.access.reconciler import Reconciler
from x402srv.config.models import Config
from x402srv.errors import (
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ProblemError,
    StoreUnavailable,
)
from x402srv.gateway.install import install_gateway
from x402srv.gateway.mcp.install import install_mcp
from x402srv.interfaces import Clock, system_clock
from x402srv.refunds.wallet import refund_readiness
from x402srv.server import metrics
from x402srv.server.health import Readiness
from x402srv.server.index import index_document, index_html, wants_html
from x402srv.server.logs import REQUEST_ID_HEADER, http_request_id
from x402srv.server.problems import problem_response
from x402srv.server.registry import Built, Registry
from x402srv.server.responses import Response, offer_response
from x402srv.tokens.revocation import LIST_PATH, StoreRevocations, published
from x402srv.usage.unpaid_limit import client_of
from x402srv.wire.card import agent_card, agent_card_v1, card_version
from x402srv.wire.offer_receipt import did_document_path
from x402srv.wire.offers import AccessGranted, PaymentOffer
from x402srv.wire.protocol import MAX_BODY_BYTES

__all__ = ["create_app"]

log = logging.getLogger("x402srv.server.app")

_JSON = "application/json"
_NO_STORE = {"Cache-Control": "no-store"}
#: The card is fixed for a configuration; which card depends on A2A-Version.
_CARD_HEADERS = {"Cache-Control": "public, max-age=300", "Vary": "A2A-Version"}


def _json(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def create_app(
    config: Config,
    *,
    registry: Registry | None = None,
    clock: Clock = system_clock,
    name: str = "x402srv",
    built: Built | None = None,
) -> Sanic[Any, Any]:
    """Build the server for ``config``; raises ``ConfigError`` if a plugin cannot be built."""
    built = built or (registry or Registry()).build(config, clock=clock)
    metrics.install(metrics.PrometheusMetrics() if config.metrics.enabled else metrics.Metrics())
    pipeline = build_pipeline(config, built, clock=clock)
    # Our root handler formats every log line; Sanic's own handlers would print each twice.
    app: Sanic[Any, Any] = Sanic(name, configure_logging=False)
    app.config.AUTO_EXTEND = False
    app.config.REQUEST_MAX_SIZE = MAX_BODY_BYTES + 1
    app.config.REQUEST_MAX_HEADER_SIZE = 16_384
    app.config.FALLBACK_ERROR_FORMAT = "json"
    app.config.ACCESS_LOG = False
    app.ctx.config = config
    app.ctx.pipeline = pipeline
    app.ctx.plugins = built
    # Only sanic-ext's HTTP extension (CORS, automatic OPTIONS/HEAD): the built-in
    # set also installs dependency injection, whose signal handler ran on every
    # request of an app that injects nothing.
    Extend(
        app,
        extensions=[HTTPExtension],
        built_in_extensions=False,
        config={
            "oas": False,
            "health": False,
            "cors": bool(config.server.cors_origins),
            "cors_origins": ",".join(config.server.cors_origins),
            "cors_expose_headers": "PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-A2A-Extensions, "
            "X-X402-Access-Token, X-X402-Grant, X-X402-Top-Up, RateLimit, RateLimit-Policy, "
            "Retry-After",
            "cors_allow_headers": "content-type, payment-signature, authorization, "
            "x-a2a-extensions, a2a-extensions, a2a-version",
            "http_auto_trace": False,
        },
    )
    _request_ids(app)
    _lifecycle(app, built)
    ready = _routes(app, config, pipeline, built)
    revocations = StoreRevocations(
        built.store, refresh_seconds=config.revocation.refresh_seconds, clock=clock
    )
    install_gateway(app, pipeline, revocations)  # [[routes]]: x402srv/gateway/
    install_mcp(app, pipeline, revocations)  # [[mcp]]: x402srv/gateway/mcp/
    if not any(route.prefix == "/" for route in config.routes):
        _index(app, config)  # GET /: x402srv/server/index.py
    sources = [revocations]
    if config.revocation.publish:
        sources.append(_revocation_list(app, config, built, clock))
    _read_revocations_first(app, sources)
    if config.admin is not None and config.admin.enabled:
        from x402srv.admin import install_admin  # the console's templates load only when it is on

        install_admin(app, pipeline, ready)
    _errors(app)
    return app


def _index(app: Sanic[Any, Any], config: Config) -> None:
    document, page = _json(index_document(config)), index_html(config).encode()

    @app.get("/", name="index")
    async def index(request: Request) -> HTTPResponse:
        vary = {"Vary": "Accept"}
        if wants_html(request.headers.get("accept")):
            return HTTPResponse(page, headers=vary, content_type="text/html; charset=utf-8")
        return HTTPResponse(document, headers=vary, content_type=_JSON)


def _request_ids(app: Sanic[Any, Any]) -> None:
    """Every request gets an id: on its log lines and echoed in ``X-Request-Id``.

    The id is made when first needed (``logs.http_request_id``: by the first log
    line of the request, else here for the response), not by a request
    middleware: Sanic's request-middleware pass alone cost a fifth of the time
    of answering an unpaid request.
    """

    async def echo_request_id(request: Request, response: BaseHTTPResponse) -> None:
        response.headers[REQUEST_ID_HEADER] = http_request_id(request)

    app.register_middleware(echo_request_id, "response", priority=1000)


def _lifecycle(app: Sanic[Any, Any], built: Built) -> None:
    @app.before_server_start
    async def open_plugins(app: Sanic[Any, Any]) -> None:
        await built.store.start()
        await built.open_chains()
        await built.settler.start()
        await built.issuer.start()

    @app.after_server_start
    async def start_reconciler(app: Sanic[Any, Any]) -> None:
        config: Config = app.ctx.config
        pipeline: AccessPipeline = app.ctx.pipeline
        app.ctx.counters_task = asyncio.get_running_loop().create_task(
            pipeline.counters.run_forever(config.analytics.flush_seconds), name="x402srv-counters"
        )
        if config.reconciler.enabled:
            reconciler = Reconciler(app.ctx.pipeline, config.reconciler)
            # Our own task on the running loop (Sanic's add_task defers it under ASGI).
            app.ctx.reconciler_task = asyncio.get_running_loop().create_task(
                reconciler.run_forever(), name="x402srv-reconciler"
            )

    @app.before_server_stop
    async def stop_reconciler(app: Sanic[Any, Any]) -> None:
        for name in ("reconciler_task", "counters_task"):
            task = getattr(app.ctx, name, None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        pipeline: AccessPipeline = app.ctx.pipeline
        await pipeline.counters.stop()  # what this worker counted since its last flush

    @app.after_server_stop
    async def close_plugins(app: Sanic[Any, Any]) -> None:
        await built.issuer.close()
        await built.settler.close()
        await built.close_chains()
        await built.store.close()


def _routes(
    app: Sanic[Any, Any], config: Config, pipeline: AccessPipeline, built: Built
) -> Readiness:
    cards = {"0.3": _json(agent_card(config)), "1.0": _json(agent_card_v1(config))}
    # The cards change only when the server starts again: that is their modification time.
    modified = formatdate(usegmt=True)
    tags = {v: '"' + hashlib.sha256(body).hexdigest()[:32] + '"' for v, body in cards.items()}
    base = config.server.base_path
    a2a = A2AEndpoint(A2AService(config, pipeline, built.store, pipeline.clock))
    app.ctx.a2a, app.ctx.a2a_path = a2a, f"{base}{config.server.a2a_path}"

    async def agent_card_route(request: Request) -> HTTPResponse:
        # Negotiated (docs/a2a.md, "Two agent cards"): caches must key on the header.
        version = card_version(request.headers.get(VERSION_HEADER))
        headers = {**_CARD_HEADERS, "ETag": tags[version], "Last-Modified": modified}
        if request.headers.get("if-none-match") == tags[version]:
            return HTTPResponse(status=304, headers=headers)
        return HTTPResponse(cards[version], content_type=_JSON, headers=headers)

    app.add_route(agent_card_route, "/.well-known/agent.json", methods=["GET"], name="card")
    app.add_route(agent_card_route, "/.well-known/agent-card.json", methods=["GET"], name="card2")

    signer = pipeline.offers.signer
    if signer is not None:  # the key that signs offers and receipts (docs/offer-receipt.md)
        did = _json(signer.did_document())

        async def did_document(request: Request) -> HTTPResponse:
            return HTTPResponse(did, content_type="application/did+json")

        path = did_document_path(config.seller.agent_url)
        app.add_route(did_document, path, methods=["GET"], name="did_document")

    @app.get("/healthz", name="healthz")
    async def healthz(request: Request) -> HTTPResponse:
        return HTTPResponse(b'{"status":"ok"}', content_type=_JSON, headers=_NO_STORE)

    ready = Readiness(
        built.store,
        built.chains,
        built.settlers,
        cache_seconds=config.server.readiness_cache_seconds,
        extras=refund_readiness(config, built.chains),
    )

    @app.get("/readyz", name="readyz")
    async def readyz(request: Request) -> HTTPResponse:
        return HTTPResponse(_json(await ready.check()), content_type=_JSON, headers=_NO_STORE)

    if config.metrics.enabled:
        sink = metrics.current()

        @app.get(config.metrics.path, name="metrics")
        async def metrics_route(request: Request) -> HTTPResponse:
            body, content_type = sink.exposition()
            return HTTPResponse(body, content_type=content_type, headers=_NO_STORE)

    @app.get("/.well-known/jwks.json", name="jwks")
    async def jwks(request: Request) -> HTTPResponse:
        keys = built.issuer.jwks()
        if keys is None:
            raise NotFound("this server signs no tokens with public keys")
        return HTTPResponse(_json(keys), content_type=_JSON)

    @app.post(f"{base}/x402/access", name="access")
    async def access(request: Request) -> HTTPResponse | None:
        envelope = sniff_envelope(request.body)
        if envelope is not None:  # the card's url speaks A2A JSON-RPC too
            return await a2a.respond_document(envelope, request)
        result = await pipeline.handle(
            AccessRequest(
                body=request.body,
                content_type=request.headers.get("content-type"),
                payment_signature=request.headers.get("payment-signature"),
                client=client_of(request),
                sign_in=request.headers.get("sign-in-with-x"),
            )
        )
        if isinstance(result, PaymentOffer):
            return offer_response(result)
        assert isinstance(result, AccessGranted)
        headers = {"PAYMENT-RESPONSE": result.payment_response, **_NO_STORE}
        return Response(_json(result.grant), 200, headers, _JSON)

    @app.post(app.ctx.a2a_path, name="a2a")
    async def a2a_route(request: Request) -> HTTPResponse | None:
        return await a2a.respond(request)  # JSON, or SSE for the streaming methods

    return ready


def _read_revocations_first(app: Sanic[Any, Any], sources: list[StoreRevocations]) -> None:
    """Each worker reads the revocation list once before it accepts a connection.

    Otherwise its first burst of requests would all hang on that one read, and
    if it failed under load they would be refused for ``refresh_seconds``
    (x402srv/tokens/revocation.py). Registered after ``open_plugins``: the store is open.
    """

    @app.before_server_start
    async def read_revocations(app: Sanic[Any, Any]) -> None:
        for source in sources:
            await source.prime()


def _revocation_list(
    app: Sanic[Any, Any], config: Config, built: Built, clock: Clock
) -> StoreRevocations:
    """The revoked grants, for verifiers that cannot read the store (``RevocationList``).

    Served from a copy of the store's list at most a second old, so polling
    verifiers, however many, cost the store one read a second per worker. A
    worker that has not read the store yet answers 503 ``STORE_UNAVAILABLE``
    (``StoreRevocations.current``), never an empty list: verifiers would take
    that as "nothing is revoked" (docs/console.md, "Revoking a grant").
    """
    refresh = config.revocation.refresh_seconds
    source = StoreRevocations(built.store, refresh_seconds=min(1.0, refresh), clock=clock)

    @app.get(LIST_PATH, name="revocations")
    async def revocation_list(request: Request) -> HTTPResponse:
        held = await source.current()
        return HTTPResponse(
            _json(published(held, refresh, clock())), content_type=_JSON, headers=_NO_STORE
        )

    return source


def _errors(app: Sanic[Any, Any]) -> None:
    @app.exception(ProblemError)
    async def problem(request: Request, error: ProblemError) -> HTTPResponse:
        if isinstance(error, StoreUnavailable):
            metrics.current().store_error()
        return problem_response(error)

    @app.exception(SanicException)
    async def sanic_error(request: Request, error: SanicException) -> HTTPResponse:
        status = getattr(error, "status_code", 500) or 500
        if status == 404:
            return problem_response(NotFound(f"no route for {request.path}"))
        if status == 405:
            return problem_response(MethodNotAllowed(f"{request.method} is not allowed here"))
        if status == 413 and request.path == request.app.ctx.a2a_path:
            endpoint: A2AEndpoint = request.app.ctx.a2a  # JSON-RPC clients get JSON-RPC
            return endpoint.too_large(MAX_BODY_BYTES, request.headers)
        if 400 <= status < 500:
            # Oversized bodies/headers and malformed HTTP: the client's input, answered as such.
            return problem_response(InvalidRequest(_client_error_detail(status)))
        log.error("unexpected framework error %s on %s", status, request.path)
        return problem_response(InternalError())

    @app.exception(Exception)
    async def unexpected(request: Request, error: Exception) -> HTTPResponse:
        log.exception("unexpected error on %s %s", request.method, request.path)
        return problem_response(InternalError())


def _client_error_detail(status: int) -> str:
    if status == 413:
        return f"the request body is larger than {MAX_BODY_BYTES} bytes"
    if status == 431:
        return "the request headers are too large"
    return "malformed HTTP request"
