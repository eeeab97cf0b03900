"""``ChainReader`` on anvil: the newest block stamped before a time; reads after close."""

from __future__ import annotations

import pytest

from x402srv.devchain import Devchain
from x402srv.settlement.chain import ChainReader, ChainUnavailable


async def test_the_newest_block_stamped_before_a_time_is_found_as_a_full_scan_finds_it(
    devchain: Devchain,
) -> None:
    # Blocks in the same second and a second apart.
    devchain.mine_ahead(5)
    devchain.mine_ahead(4, seconds_apart=1)
    devchain.mine_ahead(3)  # (4 s ahead of the wall clock for good: increase_time does 30)
    reader = ChainReader(devchain.rpc_url)
    try:
        latest = await reader.latest_block()
        number, stamp = latest
        stamps = [await reader.block_timestamp(n) for n in range(number + 1)]
        for when in sorted({*stamps, stamps[0] - 1, stamp + 1}):
            expected = max((n for n, at in enumerate(stamps) if at < when), default=-1)
            assert await reader.last_block_before(when, latest=latest) == expected, when
    finally:
        await reader.close()


async def test_a_read_after_close_fails_and_opens_nothing_until_open(devchain: Devchain) -> None:
    """A read still under way at shutdown, after the reader closed.

    Regression: the read opened a new HTTP client of the reader's own, which nothing
    closed (a reader given its client even left the new one unowned). It now fails as
    an unreachable chain does; ``open`` (a settler started again) reads again.
    """
    reader = ChainReader(devchain.rpc_url)
    assert await reader.chain_id() == devchain.chain_id  # (opened at its first read)
    await reader.close()

    with pytest.raises(ChainUnavailable, match="closed"):
        await reader.chain_id()
    assert reader._client is None

    await reader.open()
    try:
        assert await reader.chain_id() == devchain.chain_id
    finally:
        await reader.close()
