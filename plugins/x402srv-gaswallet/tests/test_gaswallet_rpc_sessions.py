"""The RPC connection's aiohttp session: one per connection, closed with it, never another."""

from __future__ import annotations

import gc

import aiohttp
import pytest
from x402srv_gaswallet.rpc import connect, disconnect

from x402srv.devchain import Devchain


def _open_sessions() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, aiohttp.ClientSession) and not o.closed)


async def test_a_request_after_disconnect_fails_and_opens_no_session(devchain: Devchain) -> None:
    """A request still under way when the settler closes (a settlement at shutdown).

    Regression: web3 opened and cached a new aiohttp session for a request that found the
    connection's session closed, and nothing ever closed that one: collected later, it
    warned (an error in the suite) inside whichever test ran then; twice in fresh-clone
    runs, in a gas-wallet test that had nothing to do with it. The request now fails
    (as one cut off by the close would), and no session is left open.
    """
    before = _open_sessions()
    w3 = await connect(devchain.rpc_url, request_timeout=5)
    assert await w3.eth.chain_id == devchain.chain_id
    await disconnect(w3)

    with pytest.raises(aiohttp.ClientConnectionError, match="closed"):
        await w3.eth.chain_id
    assert _open_sessions() == before
