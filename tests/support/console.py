"""Talking to a seller's console in tests: the admin API with its token, and its pages.

``Console`` wraps a running seller with ``[admin]`` on; purchases to look at
come from ``tests.support.purchase.buy``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.seller import Seller

__all__ = ["ADMIN_TOKEN", "Console", "console_pages"]

ADMIN_TOKEN = "console-admin-token-" + "a" * 24


@dataclass(frozen=True)
class Console:
    seller: Seller
    url: str  # the admin prefix on its listener, e.g. http://127.0.0.1:PORT/admin

    def headers(self, token: str = ADMIN_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def get(self, path: str, token: str = ADMIN_TOKEN, **params: Any) -> httpx.Response:
        return httpx.get(f"{self.url}/api{path}", params=params, headers=self.headers(token))

    def post(
        self, path: str, body: dict[str, Any] | None = None, token: str = ADMIN_TOKEN
    ) -> httpx.Response:
        return httpx.post(
            f"{self.url}/api{path}",
            content=json.dumps(body).encode() if body is not None else b"",
            headers={**self.headers(token), "Content-Type": "application/json"},
        )

    def ok(self, path: str, **params: Any) -> dict[str, Any]:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return dict(response.json())


def console_pages(console: Console, *paths: str) -> list[str]:
    """The console's HTML pages at ``paths`` (under its prefix), as a signed-in seller sees them."""
    with httpx.Client(follow_redirects=False) as client:
        signed = client.post(f"{console.url}/login", data={"token": ADMIN_TOKEN, "next": ""})
        assert signed.status_code == 303, signed.text
        pages = [client.get(f"{console.url}{path}") for path in paths]
    for path, page in zip(paths, pages, strict=True):
        assert page.status_code == 200, (path, page.text)
    return [page.text for page in pages]
