"""Fixtures for the A2A tests: sellers whose agent card names their real address.

The ``seller`` fixture of ``tests/conftest.py`` serves a card for
``http://127.0.0.1`` (no port), which is fine for raw JSON-RPC but not for the
``a2a-sdk`` client, which follows the card. ``card_seller`` is the same real
server process with ``agent_url`` set to where it actually listens.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from eth_account import Account

from tests.support.seller import JWT_SECRET, Seller, settlement_table
from x402srv.devchain import Devchain
from x402srv.testing.servers import ServerProcess, free_port, seller_config


@pytest.fixture(scope="session", params=["gas-wallet", "facilitator"])
def card_seller(
    request: pytest.FixtureRequest,
    devchain: Devchain,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Seller]:
    """One seller per settlement strategy whose card URLs reach it."""
    strategy = str(request.param)
    env: dict[str, str] = {}
    facilitator = (
        str(request.getfixturevalue("facilitator_url")) if strategy == "facilitator" else None
    )
    wallet = Account.create().address
    port = free_port()
    config = seller_config(
        rpc_url=devchain.rpc_url,
        chain_id=devchain.chain_id,
        asset=devchain.token.address,
        wallet_address=wallet,
        store={"backend": "sqlite", "path": "x402srv.db"},
        settlement=settlement_table(strategy, devchain, facilitator, env),
        credentials={"secret": JWT_SECRET},
    )
    config["seller"]["agent_url"] = f"http://127.0.0.1:{port}"
    directory = tmp_path_factory.mktemp(f"card-seller-{strategy}")
    server = ServerProcess(config, directory, env=env, port=port).start()
    try:
        yield Seller(server, wallet, strategy, config, devchain)
    finally:
        server.stop()
