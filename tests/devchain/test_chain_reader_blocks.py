"""``ChainReader.last_block_before``: the newest block stamped before a time, on anvil."""

from __future__ import annotations

from x402srv.devchain import Devchain
from x402srv.settlement.chain import ChainReader


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
