"""Repository-wide pytest setup: shared fixtures for the core's and the plugins' tests."""

import importlib.util
from collections.abc import Iterator

import pytest
from sanic import Sanic

from x402srv.testing import launcher
from x402srv.testing.tls import share_the_default_ssl_context

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


share_the_default_ssl_context()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long test files (marked ``slow``) run first, each file's tests still together.

    ``./run test`` hands whole files to two workers in this order: a long file handed out
    last would leave one worker running it alone at the end of the run.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # (a stable sort)


@pytest.fixture(scope="session", autouse=True)
def _stop_the_zygote() -> Iterator[None]:
    """The warm interpreter stops before the leak check looks for what the session left."""
    yield
    launcher.shutdown()
