"""Repository-wide pytest setup: shared fixtures for the core's and the plugins' tests."""

import importlib.util

from sanic import Sanic

# Apps are built per test; test mode avoids Sanic's app-name registry clashes.
Sanic.test_mode = True

# tests.support.leaks: the run fails if it leaves a process or a temp directory behind.
pytest_plugins = ["x402srv.testing.fixtures", "tests.support.leaks"]
# PostgreSQL clusters for the postgres plugin's tests and the core's end-to-end tests.
if importlib.util.find_spec("x402srv_postgres") is not None:
    pytest_plugins.append("x402srv_postgres.fixtures")
