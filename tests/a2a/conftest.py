"""Fixtures for the A2A tests: sellers whose agent card names their real address.

The ``seller`` fixture of ``tests/conftest.py`` serves a card for
``http://127.0.0.1`` (no port), which is fine for raw JSON-RPC but not for the
``a2a-sdk`` client, which follows the card. ``card_seller`` is the same real
server process with ``agent_url`` set to where it actually listens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.seller import Seller


@pytest.fixture(scope="session", params=["gas-wallet", "facilitator"])
def card_seller(
    request: pytest.FixtureRequest, start_seller: Callable[..., Seller]
) -> Iterator[Seller]:
    """One seller per settlement strategy whose card URLs reach it."""
    strategy = str(request.param)
    facilitator = (
        str(request.getfixturevalue("facilitator_url")) if strategy == "facilitator" else None
    )
    seller = start_seller(strategy, facilitator_url=facilitator, real_card_url=True)
    yield seller
    seller.server.stop()
