"""The door of every admin route: the right listener, then the admin credential.

With ``[admin] port`` the console has a listener of its own (bound to
``[admin] host``, 127.0.0.1 by default) and its routes answer only there: the
same paths on the public listener are 404, as if they did not exist. The
listener is the socket the request arrived on (the server's own address),
never anything the client sends, such as ``Host``.
"""

from __future__ import annotations

from typing import Any

from sanic import Request

from x402srv.admin.auth import COOKIE, Admin, AdminAuth
from x402srv.config.console import AdminConfig
from x402srv.errors import NotFound

__all__ = ["AdminGate"]


class AdminGate:
    def __init__(self, admin: AdminConfig, auth: AdminAuth) -> None:
        self.prefix = admin.prefix
        self.port = admin.port
        self.auth = auth

    def on_admin_listener(self, request: Request[Any, Any]) -> bool:
        if self.port is None:
            return True
        info = request.conn_info
        return info is not None and info.server_port == self.port

    def check_listener(self, request: Request[Any, Any]) -> None:
        if not self.on_admin_listener(request):
            raise NotFound(f"no route for {request.path}")

    def who(self, request: Request[Any, Any]) -> Admin | None:
        """The admin behind a bearer credential or a console session cookie, if any."""
        authorization = request.headers.getall("authorization", [])
        if authorization:
            return self.auth.bearer(authorization)
        return self.auth.session(request.cookies.get(COOKIE))

    def admit(self, request: Request[Any, Any]) -> Admin:
        """The admin, or ``NotFound`` (wrong listener) / ``AdminUnauthorized``."""
        self.check_listener(request)
        admin = self.who(request)
        if admin is None:
            raise self.auth.refuse()
        return admin
