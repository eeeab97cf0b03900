"""Fixtures for the console tests: a real seller with ``[admin]`` on, on the session's anvil.

``console`` serves the admin API and the console on a listener of their own
(``[admin] port``), as the deployment docs recommend; ``console_inline``
serves them under the prefix of the public port. ``make_rig`` builds an
in-process pipeline (``tests.support.rig``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support.console import ADMIN_TOKEN, Console
from tests.support.rig import MakeRig, Rig, open_rig
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.servers import free_port


@pytest.fixture(scope="session")
def console(start_seller: Callable[..., Seller]) -> Console:
    port = free_port()
    seller = start_seller(
        "gas-wallet",
        admin={"token": ADMIN_TOKEN, "port": port},
        analytics={"flush_seconds": 0.2},
    )
    return Console(seller, f"http://127.0.0.1:{port}/admin")


@pytest.fixture(scope="session")
def console_inline(start_seller: Callable[..., Seller]) -> Console:
    seller = start_seller("gas-wallet", admin={"token": ADMIN_TOKEN, "prefix": "/ops"})
    return Console(seller, f"{seller.server.url}/ops")


@pytest.fixture
async def make_rig(devchain: Devchain, tmp_path: Path) -> AsyncIterator[MakeRig]:
    """``await make_rig(**open_rig options)``: an in-process pipeline on the session's anvil."""
    async with AsyncExitStack() as stack:

        async def make(**options: Any) -> Rig:
            return await stack.enter_async_context(open_rig(devchain, tmp_path, **options))

        yield make
