"""Fixtures: the seller's key service, and a relaying account on the session's anvil.

The relaying account is a fresh account that anvil signs for
(``anvil_impersonateAccount``), as Web3Signer would for a real one: its key is
nowhere in x402srv or in these tests.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from x402srv_example.testing import KeyService

if TYPE_CHECKING:
    from x402srv.devchain import Devchain


@pytest.fixture(scope="module")
def key_service() -> Iterator[KeyService]:
    with KeyService(admin_token=secrets.token_urlsafe(24)) as service:
        yield service


@pytest.fixture(scope="module")
def relaying_account(devchain: Devchain) -> str:
    """An account with gas money whose transactions anvil signs (its key is nowhere here)."""
    address = devchain.new_account(eth=10, usdc_atomic=0).address
    devchain.rpc.call("anvil_impersonateAccount", [address])
    return address
