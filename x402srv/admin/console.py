"""The web console: server-rendered pages under ``[admin] prefix``, enhanced by htmx.

Why this shape: the pages are the admin API's documents (``AdminService``)
rendered by Jinja2 templates on the server, so there is one source of truth
and no client-side state. htmx (one 50 KB script from npm, copied into the
package at build time by ``npm run build:console``; no CDN) makes links and
forms swap the page body instead of reloading it, and refreshes the purchases
list every few seconds; without it every page and form still works as plain
HTML. The revenue chart is an SVG drawn on the server (``chart``).

Pages (GET) and actions (POST, with the session's CSRF token)::

    /                 overview: revenue chart, funnel, settler health, reconciler
    /login  /logout   the admin credential in, a session cookie out (``auth``)
    /purchases        search (payer, txHash, requestId, challengeId), newest first
    /purchases/<id>   one purchase: its history, its grant, revoke
    /grants           grants with their time left and usage; revoke
    /challenges       by state; cancel a PENDING one
    POST /grants/<id>/revoke, /challenges/<id>/cancel
    POST /purchases/<id>/refund   a confirmation page, then the refund (console_refunds)

Every answer is ``no-store`` with a strict Content-Security-Policy (scripts,
styles and forms from this origin only) and may not be framed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from sanic import Request, Sanic
from sanic.response import HTTPResponse, redirect

from x402srv._version import __version__
from x402srv.access.records import State
from x402srv.admin.auth import COOKIE, CSRF_HEADER, Admin
from x402srv.admin.chart import funnel_steps, revenue_chart
from x402srv.admin.console_refunds import install_refund_pages, refunds_panel
from x402srv.admin.gate import AdminGate
from x402srv.admin.service import AdminService
from x402srv.errors import NotFound, ProblemError
from x402srv.usage.counters import BUYER_SIDE_OUTCOMES
from x402srv.usage.money import amount_text, money

__all__ = ["install_console"]

log = logging.getLogger("x402srv.console")

_SECURITY = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
#: Overview ranges: (label, days, bucket).
RANGES = {
    "24h": ("Last 24 hours", 1, "hour"),
    "7d": ("7 days", 7, "day"),
    "30d": ("30 days", 30, "day"),
}

Page = Callable[..., Awaitable[HTTPResponse]]


def _static(name: str) -> bytes | None:
    """A packaged asset (``static/``), or None: no path ever leaves that directory."""
    root = files("x402srv.admin").joinpath("static")
    parts = name.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    node = root
    for part in parts:
        node = node.joinpath(part)
    return node.read_bytes() if node.is_file() else None


class Console:
    def __init__(self, gate: AdminGate, service: AdminService, secure: bool | None) -> None:
        self.gate = gate
        self.service = service
        self.prefix = gate.prefix
        self.secure = secure
        self.env = Environment(
            loader=PackageLoader("x402srv.admin", "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.globals.update(
            url=self.url,
            static=self.static_url,
            version=__version__,
            htmx=_static("vendor/htmx.min.js") is not None,
        )
        self.env.filters["short"] = lambda text: (
            f"{text[:8]}…{text[-6:]}" if isinstance(text, str) and len(text) > 16 else text
        )
        self.env.filters["left"] = _time_left
        # Amounts as a person reads them (x402srv.usage.money); the API keeps atomic units.
        config = service.pipeline.config
        self.env.filters["money"] = lambda row: amount_text(
            config, row["network"], row["asset"], row["amount"]
        )
        self.env.filters["money_token"] = lambda row: (
            money(config, row["network"], row["asset"], row["amount"]).token
        )
        self.env.globals["buyer_side"] = BUYER_SIDE_OUTCOMES

    def url(self, path: str = "/", **query: Any) -> str:
        wanted = {k: v for k, v in query.items() if v not in (None, "")}
        return f"{self.prefix}{path}" + (f"?{urlencode(wanted)}" if wanted else "")

    def static_url(self, name: str) -> str:
        return f"{self.prefix}/static/{name}?v={__version__}"

    def render(self, template: str, status: int = 200, **context: Any) -> HTTPResponse:
        body = self.env.get_template(template).render(**context)
        return HTTPResponse(
            body, status=status, headers=_SECURITY, content_type="text/html; charset=utf-8"
        )

    def secure_cookie(self, request: Request[Any, Any]) -> bool:
        if self.secure is not None:
            return self.secure
        return request.scheme == "https"


def _form(request: Request[Any, Any]) -> Mapping[str, Any]:
    """The posted form's fields (first value of each); empty for a body that is not a form."""
    return request.form or {}


def _time_left(seconds: int | None) -> str:
    if seconds is None:
        return "—"
    if seconds <= 0:
        return "expired"
    days, rest = divmod(int(seconds), 86_400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m" if minutes else f"{seconds}s"


def install_console(
    app: Sanic[Any, Any], gate: AdminGate, service: AdminService, secure: bool | None
) -> None:
    console = Console(gate, service, secure)
    prefix = gate.prefix

    def page(path: str, methods: tuple[str, ...] = ("GET",), *, mutating: bool = False) -> Any:
        """A console route: its listener, then a session (else the login page), then CSRF."""

        def register(handler: Page) -> Page:
            async def checked(request: Request[Any, Any], **params: str) -> HTTPResponse:
                gate.check_listener(request)
                admin = gate.auth.session(request.cookies.get(COOKIE))
                if admin is None:
                    if mutating:
                        raise gate.auth.refuse()
                    return redirect(console.url("/login", next=request.path))
                if mutating:
                    form = _form(request)
                    presented = request.headers.get(CSRF_HEADER) or form.get("csrf")
                    gate.auth.check_csrf(admin, presented)
                try:
                    return await handler(request, admin, **params)
                except ProblemError as error:
                    if error.status >= 500:
                        raise
                    return console.render(
                        "error.html",
                        status=error.status,
                        error=error,
                        csrf=gate.auth.csrf_token(admin),
                        here="",
                    )

            slug = path.strip("/").replace("/", "_").replace("<", "").replace(">", "")
            name = "admin_console_" + (slug.replace(":", "_") or "root")
            for method in methods:
                app.add_route(
                    checked,
                    f"{prefix}{path}",
                    methods=[method],
                    name=f"{name}_{method.lower()}",
                    strict_slashes=True,
                )
            return checked

        return register

    def arg(request: Request[Any, Any], name: str) -> str | None:
        value = request.args.get(name)
        return value if isinstance(value, str) and value else None

    # ------------------------------------------------------------ signing in

    async def login_form(request: Request[Any, Any]) -> HTTPResponse:
        gate.check_listener(request)
        return console.render("login.html", error=None, next=arg(request, "next") or "")

    async def login(request: Request[Any, Any]) -> HTTPResponse:
        gate.check_listener(request)
        form = _form(request)
        admin = gate.auth.credential(str(form.get("token") or ""))
        wanted = str(form.get("next") or "")
        if admin is None:
            log.warning("console: a sign-in with a wrong credential from %s", request.ip)
            return console.render(
                "login.html", status=401, error="That is not the admin credential.", next=wanted
            )
        cookie, seconds = gate.auth.new_session()
        target = wanted if wanted.startswith(prefix + "/") or wanted == prefix else console.url()
        response = redirect(target, status=303)
        response.add_cookie(
            COOKIE,
            cookie,
            path=prefix,
            max_age=seconds,
            httponly=True,
            samesite="Strict",
            secure=console.secure_cookie(request),
        )
        return response

    async def logout(request: Request[Any, Any]) -> HTTPResponse:
        gate.check_listener(request)
        response = redirect(console.url("/login"), status=303)
        response.delete_cookie(COOKIE, path=prefix)
        return response

    for handler, path, method, name in (
        (login_form, "/login", "GET", "admin_console_login"),
        (login, "/login", "POST", "admin_console_login_post"),
        (logout, "/logout", "POST", "admin_console_logout"),
    ):
        app.add_route(handler, f"{prefix}{path}", methods=[method], name=name, strict_slashes=True)

    async def static(request: Request[Any, Any], name: str) -> HTTPResponse:
        gate.check_listener(request)
        body = _static(name)
        kind = next((t for ext, t in _STATIC_TYPES.items() if name.endswith(ext)), None)
        if body is None or kind is None:
            raise NotFound(f"no route for {request.path}")
        return HTTPResponse(
            body,
            content_type=kind,
            headers={"Cache-Control": "max-age=86400", "X-Content-Type-Options": "nosniff"},
        )

    app.add_route(
        static, f"{prefix}/static/<name:path>", methods=["GET"], name="admin_console_static"
    )

    # ------------------------------------------------------------ pages

    async def overview(request: Request[Any, Any], admin: Admin) -> HTTPResponse:
        chosen = arg(request, "range") or "7d"
        label, days, bucket = RANGES.get(chosen, RANGES["7d"])
        start = service.pipeline.clock() - days * 86_400
        document = await service.overview(str(start), None, bucket)
        funnel = document["funnel"]
        stages = {s["stage"]: s["count"] for s in funnel["stages"]}
        reconciler = await service.reconciler_status()
        return console.render(
            "overview.html",
            here="overview",
            csrf=gate.auth.csrf_token(admin),
            ranges=RANGES,
            chosen=chosen if chosen in RANGES else "7d",
            label=label,
            revenue=document["revenue"],
            chart=revenue_chart(document["revenue"]),
            funnel=funnel,
            steps=funnel_steps(funnel),
            conversion=(
                f"{100 * stages['settled'] / stages['unpaid']:.1f}%" if stages["unpaid"] else "—"
            ),
            settled=stages["settled"],
            unpaid=stages["unpaid"],
            settlers=document["settlers"],
            tools=document.get("tools"),
            reconciler=reconciler,
        )

    page("/")(overview)

    async def bare(request: Request[Any, Any]) -> HTTPResponse:
        gate.check_listener(request)
        return redirect(console.url("/"))

    app.add_route(bare, prefix, methods=["GET"], name="admin_console_bare", strict_slashes=True)

    async def purchases(request: Request[Any, Any], admin: Admin) -> HTTPResponse:
        query, state, cursor = arg(request, "q"), arg(request, "state"), arg(request, "cursor")
        result = await service.purchases(query, state, cursor, None)
        context = {
            "here": "purchases",
            "csrf": gate.auth.csrf_token(admin),
            "items": result["items"],
            "next": result["nextCursor"],
            "q": query or "",
            "state": state or "",
            "live": not query and not cursor,
        }
        if arg(request, "rows"):  # htmx's refresh of the list: the rows only
            return console.render("_purchase_rows.html", **context)
        return console.render("purchases.html", **context)

    page("/purchases")(purchases)

    async def purchase(request: Request[Any, Any], admin: Admin, challenge_id: str) -> HTTPResponse:
        detail = await service.purchase(challenge_id)
        return console.render(
            "purchase.html",
            here="purchases",
            csrf=gate.auth.csrf_token(admin),
            p=detail,
            pretty=json.dumps(detail.get("grant"), indent=2) if detail.get("grant") else None,
            refunds=await refunds_panel(service.pipeline, challenge_id),
        )

    page("/purchases/<challenge_id:str>")(purchase)

    async def grants(request: Request[Any, Any], admin: Admin) -> HTTPResponse:
        payer, cursor = arg(request, "payer"), arg(request, "cursor")
        result = await service.grants(payer, cursor, None)
        return console.render(
            "grants.html",
            here="grants",
            csrf=gate.auth.csrf_token(admin),
            items=result["items"],
            next=result["nextCursor"],
            payer=payer or "",
        )

    page("/grants")(grants)

    async def revoke(request: Request[Any, Any], admin: Admin, challenge_id: str) -> HTTPResponse:
        form = _form(request)
        await service.revoke(challenge_id, str(form.get("reason") or ""), "console")
        back = str(form.get("back") or "")
        here = console.url(f"/purchases/{challenge_id}")
        return redirect(back if back.startswith(prefix + "/") else here, status=303)

    page("/grants/<challenge_id:str>/revoke", ("POST",), mutating=True)(revoke)
    install_refund_pages(page, console.render, console.url, service.pipeline, gate.auth.csrf_token)

    async def challenges(request: Request[Any, Any], admin: Admin) -> HTTPResponse:
        state, cursor = arg(request, "state"), arg(request, "cursor")
        result = await service.challenges(state, cursor, None)
        return console.render(
            "challenges.html",
            here="challenges",
            csrf=gate.auth.csrf_token(admin),
            items=result["items"],
            next=result["nextCursor"],
            state=(state or "").upper(),
            states=["", *(known.value for known in State)],
        )

    page("/challenges")(challenges)

    async def cancel(request: Request[Any, Any], admin: Admin, challenge_id: str) -> HTTPResponse:
        await service.cancel(challenge_id, "console")
        form = _form(request)
        back = str(form.get("back") or "")
        target = back if back.startswith(prefix + "/") else console.url("/challenges")
        return redirect(target, status=303)

    page("/challenges/<challenge_id:str>/cancel", ("POST",), mutating=True)(cancel)
