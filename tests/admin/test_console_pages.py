"""The console's pages over plain HTTP: the session, CSRF, headers, and no way around them.

What a browser does is tested in a real one (``tests/console``); these are the
refusals and the rules a browser would hide: a form posted without the
session's CSRF token changes nothing, a page without a session is the login
page, a static path cannot leave the package's static directory, every page
forbids framing and foreign scripts.
"""

from __future__ import annotations

import re

import httpx
from eth_account.signers.local import LocalAccount

from tests.support.console import ADMIN_TOKEN, Console
from tests.support.problems import assert_problem
from tests.support.purchase import buy


def signed_in(console: Console) -> tuple[httpx.Client, str]:
    """A client holding a console session, and the CSRF token its pages carry."""
    client = httpx.Client(base_url=console.url.rsplit("/admin", 1)[0], follow_redirects=False)
    answer = client.post("/admin/login", data={"token": ADMIN_TOKEN, "next": "/admin/grants"})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/admin/grants"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/admin" in cookie
    page = client.get("/admin/")
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None
    return client, found.group(1)


def test_without_a_session_every_page_is_the_login(console: Console) -> None:
    for path in ("/", "/purchases", "/grants", "/challenges", "/purchases/x"):
        answer = httpx.get(f"{console.url}{path}", follow_redirects=False)
        assert answer.status_code == 302, path
        assert answer.headers["location"].startswith("/admin/login?next=")
    login = httpx.get(f"{console.url}/login")
    assert login.status_code == 200 and 'name="token"' in login.text
    wrong = httpx.post(f"{console.url}/login", data={"token": "guess-" + "x" * 30})
    assert wrong.status_code == 401 and "not the admin credential" in wrong.text
    assert "set-cookie" not in wrong.headers


def test_pages_forbid_framing_and_foreign_scripts(console: Console) -> None:
    client, _ = signed_in(console)
    try:
        for path in ("/admin/", "/admin/purchases", "/admin/grants", "/admin/challenges"):
            page = client.get(path)
            assert page.status_code == 200, path
            policy = page.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert page.headers["x-frame-options"] == "DENY"
            assert page.headers["cache-control"] == "no-store"
            assert "<script" not in re.sub(
                r'<script src="/admin/static/[^"]+" defer></script>', "", page.text
            )
            assert ADMIN_TOKEN not in page.text
    finally:
        client.close()


async def test_a_form_without_its_csrf_token_changes_nothing(
    console: Console, buyer: LocalAccount
) -> None:
    grant = await buy(console.seller, buyer)
    revoke = f"/admin/grants/{grant['challengeId']}/revoke"
    client, csrf = signed_in(console)
    try:
        for token in (None, "", csrf[:-2] + "xx"):
            data = {"reason": "x"} if token is None else {"reason": "x", "csrf": token}
            assert_problem(client.post(revoke, data=data), 403, "ADMIN_FORBIDDEN")
        assert console.ok(f"/purchases/{grant['challengeId']}")["revokedAt"] is None
        # Another session's token does not do either.
        other, other_csrf = signed_in(console)
        other.close()
        assert other_csrf != csrf
        assert_problem(client.post(revoke, data={"csrf": other_csrf}), 403, "ADMIN_FORBIDDEN")
        done = client.post(revoke, data={"csrf": csrf, "reason": "abuse"})
        assert done.status_code == 303
        assert done.headers["location"] == f"/admin/purchases/{grant['challengeId']}"
        header = client.post(revoke, headers={"X-CSRF-Token": csrf})  # what htmx sends
        assert header.status_code == 303  # revoking again: nothing changes, no error
    finally:
        client.close()
    assert console.ok(f"/purchases/{grant['challengeId']}")["revokedAt"] is not None
    # Without a session a form is refused outright, CSRF token or not.
    anonymous = httpx.post(f"{console.url}/grants/x/revoke", data={"csrf": csrf})
    assert_problem(anonymous, 401, "ADMIN_UNAUTHORIZED")


def test_static_files_stay_in_their_directory(console: Console) -> None:
    css = httpx.get(f"{console.url}/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    for path in (
        "/static/../console.py",
        "/static/%2e%2e/console.py",
        "/static/..%2fconsole.py",
        "/static/vendor/../../auth.py",
        "/static/.hidden",
        "/static/templates/base.html",
        "/static/nope.css",
    ):
        answer = httpx.get(f"{console.url}{path}")
        assert answer.status_code == 404, path
        assert "import" not in answer.text


def test_the_public_port_has_no_console_pages(console: Console) -> None:
    public = console.seller.server.url
    for path in ("/admin/", "/admin/login", "/admin/static/console.css", "/admin/purchases"):
        assert_problem(httpx.get(f"{public}{path}"), 404, "NOT_FOUND")
    login = httpx.post(f"{public}/admin/login", data={"token": ADMIN_TOKEN})
    assert_problem(login, 404, "NOT_FOUND")


def test_sign_out_ends_the_session_in_the_browser(console: Console) -> None:
    client, csrf = signed_in(console)
    try:
        out = client.post("/admin/logout", data={"csrf": csrf})
        assert out.status_code == 303
        assert (
            'x402srv_admin=""' in out.headers["set-cookie"]
            or "Max-Age=0" in out.headers["set-cookie"]
        )

    finally:
        client.close()
