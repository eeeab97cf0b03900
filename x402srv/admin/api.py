"""The admin API's routes: JSON in and out, problem details with stable codes.

Under ``[admin] prefix`` (``/admin``)::

    GET  /api/overview?from&to&bucket      revenue chart, funnel, settler health
    GET  /api/revenue?from&to&bucket       per plan, network and asset; bucket hour|day
    GET  /api/funnel?from&to               unpaid -> challenges -> tried -> settled -> delivered
    GET  /api/purchases?q&state&cursor&limit     newest first; q: payer, txHash, requestId,
                                                 challengeId
    GET  /api/purchases/<challengeId>      one purchase with its history and explorer link
    GET  /api/purchases/<challengeId>/refunds   paid, refunded, left, and its refunds
    POST /api/purchases/<challengeId>/refunds   {"reason", "amount"?, "keepGrant"?}: refund
                                                and send it (docs/refunds.md)
    GET  /api/grants?payer&cursor&limit    delivered grants: time left, usage, revoked
    POST /api/grants/<challengeId>/revoke  {"reason"?}: idempotent
    GET  /api/challenges?state&cursor&limit
    POST /api/challenges/<challengeId>/cancel    PENDING -> CANCELLED: idempotent
    GET  /api/reconciler                   the last pass, what is unresolved now, what is owed
    GET  /api/settlers                     readiness and calls per outcome
    GET  /api/export?from&to&format        csv or jsonl, one row per settled payment

Routes only translate: ``AdminService`` decides, and its errors are
``ProblemError``s that the app's one handler answers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse

from x402srv.admin.auth import CSRF_HEADER, Admin
from x402srv.admin.gate import AdminGate
from x402srv.admin.refunds import ask_refund, purchase_refunds
from x402srv.admin.service import AdminService
from x402srv.errors import InvalidRequest

__all__ = ["install_api"]

_NO_STORE = {"Cache-Control": "no-store"}

Handler = Callable[..., Awaitable[HTTPResponse]]


def _json(document: Any, status: int = 200) -> HTTPResponse:
    body = json.dumps(document, separators=(",", ":")).encode()
    return HTTPResponse(body, status=status, content_type="application/json", headers=_NO_STORE)


def _body(request: Request) -> dict[str, Any]:
    """An optional JSON object body (a revocation's reason); anything else is 400."""
    if not request.body:
        return {}
    try:
        document = json.loads(request.body)
    except ValueError:
        raise InvalidRequest("the body must be a JSON object") from None
    if not isinstance(document, dict):
        raise InvalidRequest("the body must be a JSON object")
    return document


def install_api(app: Sanic[Any, Any], gate: AdminGate, service: AdminService) -> None:
    api = f"{gate.prefix}/api"

    def route(
        path: str, method: str, name: str, mutating: bool = False
    ) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            async def checked(request: Request, **params: str) -> HTTPResponse:
                admin = gate.admit(request)
                if mutating:
                    gate.auth.check_csrf(admin, request.headers.get(CSRF_HEADER))
                return await handler(request, admin, **params)

            app.add_route(checked, f"{api}{path}", methods=[method], name=f"admin_api_{name}")
            return checked

        return register

    def arg(request: Request, name: str) -> str | None:
        value = request.args.get(name)
        return value if isinstance(value, str) else None

    @route("/overview", "GET", "overview")
    async def overview(request: Request, admin: Admin) -> HTTPResponse:
        return _json(
            await service.overview(arg(request, "from"), arg(request, "to"), arg(request, "bucket"))
        )

    @route("/revenue", "GET", "revenue")
    async def revenue(request: Request, admin: Admin) -> HTTPResponse:
        return _json(
            await service.revenue(arg(request, "from"), arg(request, "to"), arg(request, "bucket"))
        )

    @route("/funnel", "GET", "funnel")
    async def funnel(request: Request, admin: Admin) -> HTTPResponse:
        return _json(await service.funnel(arg(request, "from"), arg(request, "to")))

    @route("/purchases", "GET", "purchases")
    async def purchases(request: Request, admin: Admin) -> HTTPResponse:
        return _json(
            await service.purchases(
                arg(request, "q"),
                arg(request, "state"),
                arg(request, "cursor"),
                arg(request, "limit"),
            )
        )

    @route("/purchases/<challenge_id:str>", "GET", "purchase")
    async def purchase(request: Request, admin: Admin, challenge_id: str) -> HTTPResponse:
        return _json(await service.purchase(challenge_id))

    @route("/purchases/<challenge_id:str>/refunds", "GET", "purchase_refunds")
    async def refunds_of(request: Request, admin: Admin, challenge_id: str) -> HTTPResponse:
        return _json(await purchase_refunds(service.pipeline, challenge_id))

    @route("/purchases/<challenge_id:str>/refunds", "POST", "refund", mutating=True)
    async def refund(request: Request, admin: Admin, challenge_id: str) -> HTTPResponse:
        answer = await ask_refund(service.pipeline, challenge_id, _body(request), admin.name)
        return _json(answer, status=201)

    @route("/grants", "GET", "grants")
    async def grants(request: Request, admin: Admin) -> HTTPResponse:
        return _json(
            await service.grants(
                arg(request, "payer"), arg(request, "cursor"), arg(request, "limit")
            )
        )

    @route("/grants/<challenge_id:str>/revoke", "POST", "revoke", mutating=True)
    async def revoke(request: Request, admin: Admin, challenge_id: str) -> HTTPResponse:
        reason = _body(request).get("reason")
        if reason is not None and not isinstance(reason, str):
            raise InvalidRequest("reason must be a string")
        return _json(await service.revoke(challenge_id, reason, admin.name))

    @route("/challenges", "GET", "challenges")
    async def challenges(request: Request, admin: Admin) -> HTTPResponse:
        return _json(
            await service.challenges(
                arg(request, "state"), arg(request, "cursor"), arg(request, "limit")
            )
        )

    @route("/challenges/<challenge_id:str>/cancel", "POST", "cancel", mutating=True)
    async def cancel(request: Request, admin: Admin, challenge_id: str) -> HTTPResponse:
        return _json(await service.cancel(challenge_id, admin.name))

    @route("/reconciler", "GET", "reconciler")
    async def reconciler(request: Request, admin: Admin) -> HTTPResponse:
        return _json(await service.reconciler_status())

    @route("/settlers", "GET", "settlers")
    async def settlers(request: Request, admin: Admin) -> HTTPResponse:
        return _json(await service.settlers())

    @route("/export", "GET", "export")
    async def export(request: Request, admin: Admin) -> HTTPResponse:
        name, text = await service.export(
            arg(request, "from"), arg(request, "to"), arg(request, "format")
        )
        kind = "application/x-ndjson" if name.endswith(".jsonl") else "text/csv; charset=utf-8"
        return HTTPResponse(
            text,
            content_type=kind,
            headers={**_NO_STORE, "Content-Disposition": f'attachment; filename="{name}"'},
        )
