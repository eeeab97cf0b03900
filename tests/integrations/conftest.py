"""Fixtures for the seller integrations: a real upstream API and a real x402srv gateway.

Everything here is a real process: the upstream is ``echo_upstream`` (from
``tests/conftest.py``: ``apps/echo_upstream.py`` under uvicorn), the gateway
is ``python -m x402srv`` with ``[[routes]]`` pointing at it, settling on the
session's anvil with the gas wallet. Tokens for the forwarding tests come
from the real ``jwt`` issuer with the gateway's own secret; the purchase
tests buy them with the official x402 client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.apps import AppProcess
from tests.support.gateway import AGENT_URL, eddsa_credentials, gateway_routes
from tests.support.seller import Seller


@pytest.fixture(scope="session")
def gateway(start_seller: Callable[..., Seller], echo_upstream: AppProcess) -> Seller:
    """x402srv in gateway mode in front of ``upstream``."""
    return start_seller("gas-wallet", routes=gateway_routes(echo_upstream.url))


@pytest.fixture(scope="session")
def eddsa_seller(start_seller: Callable[..., Seller]) -> Seller:
    """An x402srv that signs EdDSA tokens and publishes its key at /.well-known/jwks.json."""
    return start_seller("gas-wallet", credentials=eddsa_credentials("eddsa-k1"))


def _app(
    tmp_path_factory: pytest.TempPathFactory, target: str, env: dict[str, str], **kw: Any
) -> Iterator[AppProcess]:
    log = tmp_path_factory.mktemp("app") / "app.log"
    process = AppProcess(target, log, env=env, **kw).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def fastapi_app(tmp_path_factory: pytest.TempPathFactory, gateway: Seller) -> Iterator[AppProcess]:
    """The README's FastAPI seller, verifying with the shared HS256 secret of its config."""
    env = {**gateway.server.env, "X402SRV_TEST_CONFIG": str(gateway.server.config_path)}
    yield from _app(tmp_path_factory, "tests.integrations.apps.fastapi_seller:app", env)


@pytest.fixture(scope="session")
def fastapi_jwks_app(
    tmp_path_factory: pytest.TempPathFactory, eddsa_seller: Seller
) -> Iterator[AppProcess]:
    """The same FastAPI seller, verifying with x402srv's published JWKS instead of a secret."""
    env = {
        **eddsa_seller.server.env,
        "X402SRV_TEST_CONFIG": str(eddsa_seller.server.config_path),
        "X402SRV_TEST_JWKS_URL": f"{eddsa_seller.server.url}/.well-known/jwks.json",
    }
    yield from _app(tmp_path_factory, "tests.integrations.apps.fastapi_seller:app", env)


@pytest.fixture(scope="session")
def wsgi_app(
    tmp_path_factory: pytest.TempPathFactory, eddsa_seller: Seller
) -> Iterator[AppProcess]:
    """A framework-free WSGI app using ``verify_access_token_sync`` with the JWKS."""
    env = {
        "X402SRV_TEST_AUDIENCE": AGENT_URL,
        "X402SRV_TEST_JWKS_URL": f"{eddsa_seller.server.url}/.well-known/jwks.json",
    }
    yield from _app(tmp_path_factory, "tests.integrations.apps.wsgi_seller", env, uvicorn=False)
