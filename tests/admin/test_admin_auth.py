"""The console's door: ``[admin]`` config, the admin credential, sessions and CSRF.

Named regressions: a buyer's access token never opens the console, not even
one signed with the admin JWT secret; a session cookie whose MAC or expiry
was edited is refused; a session's form needs that session's CSRF token.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from x402srv.admin.auth import Admin, AdminAuth
from x402srv.config.console import AdminConfig
from x402srv.config.models import Config, parse_config
from x402srv.errors import AdminForbidden, ConfigError

TOKEN = "admin-token-" + "t" * 24
JWT_SECRET = "admin-jwt-secret-" + "j" * 32
AGENT = "https://api.example.com"


def _config(tmp_path: Path, **sections: Any) -> Config:
    return parse_config(
        {
            "seller": {
                "agent_name": "Weather Oracle",
                "agent_description": "Paid hourly weather data",
                "agent_url": AGENT,
                "provider_name": "Example Inc",
                "provider_url": "https://example.com",
                "wallet_address": "0x" + "11" * 20,
                "network": "base-sepolia",
            },
            "plans": [{"plan_id": "hourly", "unit_amount": "$0.10", "description": "An hour"}],
            "credentials": {"secret": "s" * 32},
            **sections,
        },
        base_dir=tmp_path,
        env={"ADMIN": TOKEN},
    )


class Clock:
    now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _auth(**admin: Any) -> tuple[AdminAuth, Clock]:
    clock = Clock()
    return AdminAuth(AdminConfig(**admin), AGENT, clock), clock


# ------------------------------------------------------------ config


def test_the_console_is_off_unless_configured(tmp_path: Path) -> None:
    assert _config(tmp_path).admin is None
    config = _config(tmp_path, admin={"token": {"env": "ADMIN"}})
    assert config.admin is not None and config.admin.prefix == "/admin"
    assert TOKEN not in repr(config) and TOKEN not in str(config.describe())


@pytest.mark.parametrize(
    ("admin", "message"),
    [
        ({}, r"admin\.token: the console needs a credential"),
        ({"token": "short"}, r"admin\.token: must be at least 24 bytes"),
        ({"jwt_secret": "short"}, r"admin\.jwt_secret: an HS256 secret must be at least 32"),
        ({"token": TOKEN, "prefix": "admin"}, r"admin\.prefix"),
        ({"token": TOKEN, "prefix": "/healthz"}, r"admin\.prefix: /healthz is one of"),
        ({"token": TOKEN, "prefix": "/.well-known/x"}, r"admin\.prefix"),
        ({"token": TOKEN, "prefix": "/x402"}, r"admin\.prefix: /x402 overlaps the access"),
        ({"token": TOKEN, "port": 8402}, r"admin\.port: must differ from server\.port"),
        ({"token": TOKEN, "host": "10.0.0.1"}, r"admin\.port: host needs a port"),
        ({"token": "s" * 32}, r"admin\.token: must not be credentials\.secret"),
        ({"jwt_secret": "s" * 32}, r"admin\.jwt_secret: must not be credentials\.secret"),
        ({"token": TOKEN, "colour": "red"}, r"admin\.colour"),
    ],
)
def test_bad_admin_tables(tmp_path: Path, admin: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, admin=admin)


def test_a_console_of_its_own_may_use_any_prefix(tmp_path: Path) -> None:
    """On its own listener nothing else is served, so no path can clash."""
    config = _config(tmp_path, admin={"token": TOKEN, "prefix": "/x402", "port": 9402})
    assert config.admin is not None and config.admin.listen_host == "127.0.0.1"


def test_enabled_false_needs_no_credential(tmp_path: Path) -> None:
    config = _config(tmp_path, admin={"enabled": False})
    assert config.admin is not None and not config.admin.enabled


# ------------------------------------------------------------ credentials


def test_the_token_is_the_credential() -> None:
    auth, _ = _auth(token=TOKEN)
    assert auth.credential(TOKEN) == Admin("token")
    assert auth.bearer([f"Bearer {TOKEN}"]) == Admin("token")
    assert auth.bearer([f"bearer {TOKEN}"]) == Admin("token")
    for wrong in (TOKEN[:-1], TOKEN + "x", "", " ", TOKEN.upper(), "x" * 9000):
        assert auth.credential(wrong) is None
    assert auth.bearer([f"Basic {TOKEN}"]) is None
    assert auth.bearer([f"Bearer {TOKEN}", f"Bearer {TOKEN}"]) is None
    assert auth.bearer([]) is None


def _admin_jwt(secret: str = JWT_SECRET, **claims: Any) -> str:
    headers = claims.pop("headers", None)
    body = {"aud": f"{AGENT}/admin", "exp": Clock.now + 60, "sub": "ops@example.com", **claims}
    body = {key: value for key, value in body.items() if value is not None}  # None: left out
    return jwt.encode(body, secret, algorithm="HS256", headers=headers)


def test_an_admin_jwt_is_a_credential() -> None:
    auth, clock = _auth(jwt_secret=JWT_SECRET)
    assert auth.credential(_admin_jwt()) == Admin("jwt:ops@example.com")
    assert auth.credential(_admin_jwt(sub=None)) == Admin("jwt")
    assert auth.credential(_admin_jwt(aud="https://api.example.com")) is None
    assert auth.credential(_admin_jwt(secret="another-secret-" + "o" * 32)) is None
    assert auth.credential(_admin_jwt(exp=clock.now - 1)) is None
    no_expiry = jwt.encode({"aud": f"{AGENT}/admin"}, JWT_SECRET, algorithm="HS256")
    assert auth.credential(no_expiry) is None
    none_alg = jwt.encode({"aud": f"{AGENT}/admin", "exp": clock.now + 60}, "", algorithm="none")
    assert auth.credential(none_alg) is None


def test_a_buyer_token_never_opens_the_console() -> None:
    """Even one signed with the admin secret: ``typ: at+jwt`` is a buyer's access token."""
    auth, _ = _auth(jwt_secret=JWT_SECRET)
    for typ in ("at+jwt", "AT+JWT", "application/at+jwt"):
        assert auth.credential(_admin_jwt(headers={"typ": typ})) is None


# ------------------------------------------------------------ sessions and CSRF


def test_a_session_lives_as_long_as_configured() -> None:
    auth, clock = _auth(token=TOKEN, session_hours=1)
    cookie, seconds = auth.new_session()
    assert seconds == 3600
    admin = auth.session(cookie)
    assert admin is not None and admin.name == "session" and admin.session
    clock.now += 3599
    assert auth.session(cookie) is not None
    clock.now += 1
    assert auth.session(cookie) is None


def test_an_edited_session_is_refused() -> None:
    auth, _ = _auth(token=TOKEN)
    cookie, _ = auth.new_session()
    version, expires, nonce, mac = cookie.split(".")
    for edited in (
        f"{version}.{int(expires) + 10**6}.{nonce}.{mac}",
        f"{version}.{expires}.{nonce}x.{mac}",
        f"v2.{expires}.{nonce}.{mac}",
        f"{version}.{expires}.{nonce}.{mac[:-1]}{'B' if mac.endswith('A') else 'A'}",
        f"{version}.{expires}.{nonce}",
        "",
        "x" * 300,
    ):
        assert auth.session(edited) is None, edited
    other, _ = _auth(token="another-admin-token-" + "o" * 24)
    assert other.session(cookie) is None  # a changed credential ends every session


def test_csrf_tokens_belong_to_their_session() -> None:
    auth, _ = _auth(token=TOKEN)
    first = auth.session(auth.new_session()[0])
    second = auth.session(auth.new_session()[0])
    assert first is not None and second is not None
    auth.check_csrf(first, auth.csrf_token(first))
    for wrong in (None, "", auth.csrf_token(second)):
        with pytest.raises(AdminForbidden):
            auth.check_csrf(first, wrong)
    auth.check_csrf(Admin("token"), None)  # bearer calls: no browser sends those by itself


def test_time_is_the_injected_clock() -> None:
    auth, clock = _auth(jwt_secret=JWT_SECRET)
    token = _admin_jwt(exp=clock.now + 5)
    assert auth.credential(token) is not None
    clock.now += 5
    assert auth.credential(token) is None
    assert time.time() != clock.now
