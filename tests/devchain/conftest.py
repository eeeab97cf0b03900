"""Session-wide local chain for the devchain tests.

One anvil + token deployment serves every test; tests stay independent by using fresh
random accounts from `devchain.new_account()`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from x402srv.devchain import Devchain


@pytest.fixture(scope="session")
def devchain() -> Iterator[Devchain]:
    with Devchain.start() as chain:
        yield chain
