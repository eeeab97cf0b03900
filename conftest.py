"""Repository-wide pytest setup: shared fixtures for the core's and the plugins' tests."""

import importlib.util
import os
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx._transports import default as httpx_transports
from sanic import Sanic

from x402srv.testing import launcher

# Apps are built per test; test mode avoids Sanic's app-name registry clashes.
Sanic.test_mode = True
# x402srv processes (servers, operator commands) are forked from one warm interpreter that
# imported x402srv once, instead of each importing it again (x402srv/testing/launcher.py).
launcher.WARM = True

# tests.support.leaks: the run fails if it leaves a process or a temp directory behind;
# tests.support.fixture_scopes: which scope started a seller (it stops at that scope's end).
pytest_plugins = ["x402srv.testing.fixtures", "tests.support.leaks", "tests.support.fixture_scopes"]
# PostgreSQL clusters for the postgres plugin's tests and the core's end-to-end tests.
if importlib.util.find_spec("x402srv_postgres") is not None:
    pytest_plugins.append("x402srv_postgres.fixtures")


def _share_the_default_ssl_context() -> None:
    """httpx clients that verify as httpx does by default share one SSL context.

    httpx builds a context for every client it makes, and so for every
    ``httpx.get``/``httpx.post``; loading certifi's CA bundle into it takes
    ~17 ms of CPU, and the suite makes thousands, in the process that the
    servers under test share a core with. The shared context is the one httpx
    would build (the same call, made once per environment); a client that asks
    for anything else (its own context, no verification, a certificate) gets a
    context of its own.
    """
    build = httpx.create_ssl_context  # (what httpx's transports call, through their own import)
    shared: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        # (what httpx reads to build it: SSL_CERT_FILE or SSL_CERT_DIR, if it trusts the env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in shared:
            shared[key] = build(verify=True, trust_env=trust_env)
        return shared[key]

    httpx_transports.create_ssl_context = create_ssl_context  # type: ignore[attr-defined]


_share_the_default_ssl_context()


@pytest.fixture(scope="session", autouse=True)
def _stop_the_zygote() -> Iterator[None]:
    """The warm interpreter stops before the leak check looks for what the session left."""
    yield
    launcher.shutdown()
