"""``create_app(config) -> Sanic``: routes translate HTTP to the pipeline and back.

No route chooses a status code from business logic: the pipeline returns an
offer (402), a grant (200) or raises a ``ProblemError`` which one handler turns
into problem+json. Plugins are opened in ``before_server_start`` and closed in
``after_server_stop``, once per worker process.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sanic import Request, Sanic
from sanic.exceptions import SanicException
from sanic.response import HTTPResponse
from sanic_ext import Extend

from .card import agent_card
from .config import Config
from .errors import (
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    ProblemError,
)
from .http_problem import problem_response
from .interfaces import Clock, system_clock
from .offers import AccessGranted, PaymentOffer
from .pipeline import AccessPipeline, AccessRequest
from .protocol import MAX_BODY_BYTES
from .registry import Built, Registry

__all__ = ["create_app"]

log = logging.getLogger("x402srv.app")

_JSON = "application/json"
_NO_STORE = {"Cache-Control": "no-store"}


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
    pipeline = AccessPipeline(
        config,
        store=built.store,
        settler=built.settler,
        issuer=built.issuer,
        chain=built.chain,
        clock=clock,
    )
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
    Extend(
        app,
        config={
            "oas": False,
            "health": False,
            "cors": bool(config.server.cors_origins),
            "cors_origins": ",".join(config.server.cors_origins),
            "cors_expose_headers": "PAYMENT-REQUIRED, PAYMENT-RESPONSE",
            "cors_allow_headers": "content-type, payment-signature, authorization",
            "http_auto_trace": False,
        },
    )
    _lifecycle(app, built)
    _routes(app, config, pipeline, built)
    _errors(app)
    return app


def _lifecycle(app: Sanic[Any, Any], built: Built) -> None:
    @app.before_server_start
    async def open_plugins(app: Sanic[Any, Any]) -> None:
        await built.store.open()
        if built.chain is not None:
            await built.chain.open()
        await built.settler.start()
        await built.issuer.start()

    @app.after_server_stop
    async def close_plugins(app: Sanic[Any, Any]) -> None:
        await built.issuer.close()
        await built.settler.close()
        if built.chain is not None:
            await built.chain.close()
        await built.store.close()


def _routes(app: Sanic[Any, Any], config: Config, pipeline: AccessPipeline, built: Built) -> None:
    card = _json(agent_card(config))
    base = config.server.base_path

    async def agent_card_route(request: Request) -> HTTPResponse:
        return HTTPResponse(card, content_type=_JSON)

    app.add_route(agent_card_route, "/.well-known/agent.json", methods=["GET"], name="card")
    app.add_route(agent_card_route, "/.well-known/agent-card.json", methods=["GET"], name="card2")

    @app.get("/.well-known/jwks.json", name="jwks")
    async def jwks(request: Request) -> HTTPResponse:
        keys = built.issuer.jwks()
        if keys is None:
            raise NotFound("this server signs no tokens with public keys")
        return HTTPResponse(_json(keys), content_type=_JSON)

    @app.post(f"{base}/x402/access", name="access")
    async def access(request: Request) -> HTTPResponse:
        result = await pipeline.handle(
            AccessRequest(
                body=request.body,
                content_type=request.headers.get("content-type"),
                payment_signature=request.headers.get("payment-signature"),
            )
        )
        if isinstance(result, PaymentOffer):
            headers = {"PAYMENT-REQUIRED": result.header, **_NO_STORE}
            return HTTPResponse(_json(result.body), 402, headers, _JSON)
        assert isinstance(result, AccessGranted)
        headers = {"PAYMENT-RESPONSE": result.payment_response, **_NO_STORE}
        return HTTPResponse(_json(result.grant), 200, headers, _JSON)

    @app.post(f"{base}{config.server.a2a_path}", name="a2a")
    async def a2a(request: Request) -> HTTPResponse:
        request_id: Any = None
        try:
            envelope = json.loads(request.body or b"null")
            if isinstance(envelope, dict) and isinstance(envelope.get("id"), str | int):
                request_id = envelope["id"]
        except (ValueError, RecursionError):
            pass
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {
                "code": -32004,
                "message": "A2A JSON-RPC is not implemented yet; use POST "
                f"{config.access_url} (x402 over HTTP)",
            },
        }
        return HTTPResponse(_json(body), 501, content_type=_JSON)


def _errors(app: Sanic[Any, Any]) -> None:
    @app.exception(ProblemError)
    async def problem(request: Request, error: ProblemError) -> HTTPResponse:
        return problem_response(error)

    @app.exception(SanicException)
    async def sanic_error(request: Request, error: SanicException) -> HTTPResponse:
        status = getattr(error, "status_code", 500) or 500
        if status == 404:
            return problem_response(NotFound(f"no route for {request.path}"))
        if status == 405:
            return problem_response(MethodNotAllowed(f"{request.method} is not allowed here"))
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
