"""Repository-wide pytest setup: shared fixtures for the core's and the plugins' tests."""

from sanic import Sanic

# Apps are built per test; test mode avoids Sanic's app-name registry clashes.
Sanic.test_mode = True

pytest_plugins = ["x402srv.testing.fixtures"]
