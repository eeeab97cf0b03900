"""Who may use the console: the admin credential, console sessions, and CSRF tokens.

The admin API takes ``Authorization: Bearer <credential>`` where the
credential is the ``[admin] token`` (compared with ``hmac.compare_digest``,
so the time taken says nothing about how much of it matched) or an admin
JWT (HS256 with ``[admin] jwt_secret``, ``aud`` = the admin audience, ``exp``
required). Buyers' access tokens are signed with another key and carry
``typ: at+jwt``, which is refused outright: they never open the console.

The browser console logs in once with the same credential and then holds a
session cookie: ``v1.<expires>.<nonce>.<mac>``, an HMAC under a key derived
from the admin credential, so any worker or instance with the same config
accepts it and changing the credential ends every session. The cookie is
``HttpOnly`` and ``SameSite=Strict``; every state-changing request made with
it must also carry the session's CSRF token (``X-CSRF-Token``, or a
``csrf`` form field), which pages embed. Bearer calls need no CSRF token:
browsers never attach them by themselves.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import jwt

from x402srv.config.console import AdminConfig
from x402srv.errors import AdminForbidden, AdminUnauthorized
from x402srv.interfaces import Clock

__all__ = ["COOKIE", "CSRF_HEADER", "Admin", "AdminAuth"]

COOKIE: Final = "x402srv_admin"
CSRF_HEADER: Final = "x-csrf-token"
_SESSION_LABEL: Final = b"x402srv console session v1"
_BUYER_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})
_MAX_CREDENTIAL: Final = 8192


@dataclass(frozen=True, slots=True)
class Admin:
    """Who is acting: ``token``, a JWT's ``sub``, or ``session`` (a console login)."""

    name: str
    session: str | None = None  # the cookie's nonce: what its CSRF token is bound to


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class AdminAuth:
    def __init__(self, admin: AdminConfig, agent_url: str, clock: Clock) -> None:
        self._token = admin.token.reveal().encode() if admin.token is not None else None
        self._jwt_key = admin.jwt_secret.reveal().encode() if admin.jwt_secret else None
        self.audience = admin.jwt_audience or f"{agent_url}{admin.prefix}"
        self.session_seconds = int(admin.session_hours * 3600)
        self.clock = clock
        root = self._token or self._jwt_key
        assert root is not None  # AdminConfig requires one of them
        self._session_key = hmac.new(root, _SESSION_LABEL, hashlib.sha256).digest()

    # ------------------------------------------------------------ the credential

    def credential(self, presented: str) -> Admin | None:
        """The admin a presented credential (token or admin JWT) names, or None."""
        value = presented.strip()
        if not value or len(value) > _MAX_CREDENTIAL:
            return None
        if self._token is not None and hmac.compare_digest(value.encode(), self._token):
            return Admin("token")
        if self._jwt_key is not None and value.count(".") == 2:
            return self._admin_jwt(value)
        return None

    def _admin_jwt(self, token: str) -> Admin | None:
        assert self._jwt_key is not None
        try:
            header = jwt.get_unverified_header(token)
            if str(header.get("typ", "")).lower() in _BUYER_TYPES:
                return None  # a buyer's access token, whatever key signed it
            claims = jwt.decode(
                token,
                self._jwt_key,
                algorithms=["HS256"],
                audience=self.audience,
                options={"require": ["exp", "aud"], "verify_exp": False},
            )
        except jwt.PyJWTError:
            return None
        exp = claims.get("exp")
        if isinstance(exp, bool) or not isinstance(exp, int | float) or exp <= self.clock():
            return None
        subject = claims.get("sub")
        return Admin(f"jwt:{subject}" if isinstance(subject, str) and subject else "jwt")

    def bearer(self, authorization: Sequence[str]) -> Admin | None:
        """The admin of exactly one ``Authorization: Bearer`` header, or None."""
        if len(authorization) != 1:
            return None
        scheme, _, value = authorization[0].strip().partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.credential(value)

    # ------------------------------------------------------------ console sessions

    def new_session(self) -> tuple[str, int]:
        """A session cookie value and its lifetime in seconds."""
        expires = int(self.clock()) + self.session_seconds
        nonce = secrets.token_urlsafe(16)
        body = f"v1.{expires}.{nonce}"
        return f"{body}.{self._mac(body)}", self.session_seconds

    def session(self, cookie: str | None) -> Admin | None:
        if not cookie or len(cookie) > 256:
            return None
        body, _, mac = cookie.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[0] != "v1" or not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            expires = int(parts[1])
        except ValueError:
            return None
        if expires <= self.clock():
            return None
        return Admin("session", session=parts[2])

    def csrf_token(self, admin: Admin) -> str:
        """The token forms and htmx requests of this session send back (none for bearer)."""
        if admin.session is None:
            return ""
        return self._mac(f"csrf.{admin.session}")

    def check_csrf(self, admin: Admin, presented: str | None) -> None:
        if admin.session is None:
            return  # a bearer credential: no browser sends it on its own
        if not presented or not hmac.compare_digest(presented, self.csrf_token(admin)):
            raise AdminForbidden("this form is missing its CSRF token; reload the page")

    def _mac(self, text: str) -> str:
        return _b64(hmac.new(self._session_key, text.encode(), hashlib.sha256).digest()[:24])

    # ------------------------------------------------------------ one place that refuses

    @staticmethod
    def refuse() -> AdminUnauthorized:
        return AdminUnauthorized(
            "send the admin credential (Authorization: Bearer <[admin] token or admin JWT>)"
        )
