"""Seller callbacks for the ``callback`` issuer tests, named by dotted path.

``tests.support.issuer_callbacks:<name>`` is how a seller's TOML would name them.
Each records what it was given in ``CALLS`` so a test can check the payload and
the thread it ran on.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

TOKEN = "seller-token-7f3a9c1e5b"
CALLS: list[tuple[dict[str, str], int]] = []
#: What ``answer_as_set`` returns; the malformed-answer tests set it.
ANSWER: Any = None
#: Released by the test once it has seen the timeout, so the worker thread ends.
RELEASE = threading.Event()

not_callable = 42


def _record(request: dict[str, str]) -> None:
    CALLS.append((dict(request), threading.get_ident()))


def issue_sync(request: dict[str, str]) -> dict[str, Any]:
    _record(request)
    return {"token": TOKEN}


async def issue_async(request: dict[str, str]) -> dict[str, Any]:
    _record(request)
    await asyncio.sleep(0)
    return {"token": TOKEN, "tokenType": "Bearer", "expiresAt": "2026-01-01T02:00:00Z"}


def issue_unix_expiry(request: dict[str, str]) -> dict[str, Any]:
    _record(request)
    return {"token": TOKEN, "expiresAt": 1_767_229_200}


class _AsyncCallable:
    async def __call__(self, request: dict[str, str]) -> dict[str, Any]:
        _record(request)
        return {"token": TOKEN, "tokenType": "DPoP"}


issue_callable = _AsyncCallable()


class Nested:
    @staticmethod
    def issue(request: dict[str, str]) -> dict[str, Any]:
        _record(request)
        return {"token": TOKEN}


def raise_error(request: dict[str, str]) -> dict[str, Any]:
    raise RuntimeError("seller database is down")


async def raise_async(request: dict[str, str]) -> dict[str, Any]:
    raise LookupError("no such resource")


def raise_timeout_error(request: dict[str, str]) -> dict[str, Any]:
    """Raises TimeoutError itself, long before the issuer's deadline."""
    raise TimeoutError("upstream said no")


async def slow_async(request: dict[str, str]) -> dict[str, Any]:
    await asyncio.sleep(3600)
    return {"token": TOKEN}


def slow_sync(request: dict[str, str]) -> dict[str, Any]:
    RELEASE.wait(timeout=30)
    return {"token": TOKEN}


def answer_as_set(request: dict[str, str]) -> Any:
    return ANSWER
