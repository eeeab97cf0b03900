"""Fixtures for the MCP gateway: a real FastMCP upstream process and x402srv in front of it.

The upstream is ``tests/support/mcp_upstream.py`` under uvicorn; the seller is
``python -m x402srv`` with an ``[[mcp]]`` table, settling on the session's anvil
with the gas wallet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.apps import AppProcess
from tests.support.mcp import CALLS_PLAN, HOURLY_PLAN, mcp_table
from tests.support.seller import Seller


@pytest.fixture(scope="session")
def mcp_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    """The seller's MCP server (FastMCP, Streamable HTTP at /mcp)."""
    log = tmp_path_factory.mktemp("mcp-upstream") / "upstream.log"
    process = AppProcess("tests.support.mcp_upstream:app", log).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def mcp_seller(start_seller: Callable[..., Seller], mcp_upstream: AppProcess) -> Seller:
    """x402srv selling the upstream's tools at /mcp (sqlite store, metrics on)."""
    return start_seller(
        "gas-wallet",
        plans=[CALLS_PLAN, HOURLY_PLAN],
        mcp=[mcp_table(mcp_upstream.url)],
        metrics={"enabled": True},
    )
