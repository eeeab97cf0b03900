"""A connection that closes under a command is a store outage (503), never a 500.

Regression (a CI run of ``test_redis_restarted_mid_run``): Redis stopping while
redis-py sent a command on a socket it had just opened made uvloop raise
``RuntimeError: unable to perform operation on <TCPTransport closed=True ...>;
the handler is closed``, which no handler expected, and the buyer got 500
INTERNAL_ERROR. That interleaving cannot be produced on cue (the server's close
must land between redis-py's connect and its first write), so the error is
raised here as uvloop raises it, inside ``converted``, the one place every store
command goes through; any other RuntimeError must still surface.
"""

from __future__ import annotations

import pytest
from x402srv_redis.connection import converted

from x402srv.errors import StoreUnavailable
from x402srv.plugin import Secret

URL = Secret("redis://:pass@127.0.0.1:6390/0")
CLOSED = (
    "unable to perform operation on <TCPTransport closed=True reading=False "
    "0x56299f8ec0f0>; the handler is closed"
)


def test_a_connection_closed_under_a_command_is_a_store_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(StoreUnavailable) as raised, converted("get_challenge", URL):
        raise RuntimeError(CLOSED)

    assert raised.value.status == 503
    assert "get_challenge failed: the connection closed" in caplog.text
    assert "pass" not in caplog.text


def test_any_other_runtime_error_is_not_taken_for_an_outage() -> None:
    with pytest.raises(RuntimeError, match="a bug of ours"), converted("get_challenge", URL):
        raise RuntimeError("a bug of ours")
