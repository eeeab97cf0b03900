"""Repository-wide pytest setup: shared fixtures for the core's and the plugins' tests."""

import importlib.util

from sanic import Sanic

# Apps are built per test; test mode avoids Sanic's app-name registry clashes.
Sanic.test_mode = True

pytest_plugins = ["x402srv.testing.fixtures"]
# PostgreSQL clusters for the postgres plugin's tests and the core's end-to-end tests.
if importlib.util.find_spec("x402srv_postgres") is not None:
    pytest_plugins.append("x402srv_postgres.fixtures")
