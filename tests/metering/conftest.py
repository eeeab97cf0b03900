"""A real x402srv gateway selling calls, in front of the echo upstream, on the session's anvil."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.apps import AppProcess
from tests.support.metering import PLANS, metering_routes
from tests.support.seller import Seller


@pytest.fixture(scope="session")
def metered_gateway(start_seller: Callable[..., Seller], echo_upstream: AppProcess) -> Seller:
    """Plans that sell calls behind ``/llm``, ``/chat``, ``/bulk``; metrics on; sqlite."""
    return start_seller(
        "gas-wallet",
        plans=PLANS,
        routes=metering_routes(echo_upstream.url),
        metrics={"enabled": True},
    )
