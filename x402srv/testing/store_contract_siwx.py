"""The store contract on sign-in-with-x nonces (docs/sign-in-with-x.md).

A signed sign-in gives a wallet its grant again without paying, so its nonce
must be used once, whichever worker or instance it reaches first: of any
number of requests racing with one message exactly one gets the grant
(``SiwxNonceUsed`` for the others, 409 on the wire). The claim is the core's
own (``x402srv.access.sign_in.use_nonce``, a create-if-absent task document),
so these tests hold a store to what sign-in really asks of it, and a nonce's
document goes once the message would be refused as too old anyway.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest

from x402srv.access.sign_in import CLOCK_SKEW_SECONDS, use_nonce
from x402srv.errors import SiwxNonceUsed
from x402srv.interfaces import Store
from x402srv.testing.builders import BASE_TIME
from x402srv.testing.store_contract_base import RACERS, StoreContractBase

__all__ = ["SiwxNonceContract"]

PAYER = "0x00000000000000000000000000000000000000A1"
#: Until when the messages of these tests could be accepted.
VALID_UNTIL = BASE_TIME + 300


def new_nonce() -> str:
    return secrets.token_hex(24)  # a scope tag and a random part, as the 402 declares them


async def uses(stores: list[Store], nonce: str) -> list[bool]:
    """Race one nonce's use through each store in turn; whether each use won."""

    async def use(store: Store) -> bool:
        try:
            await use_nonce(store, nonce, payer=PAYER, valid_until=VALID_UNTIL)
        except SiwxNonceUsed:
            return False
        return True

    return list(await asyncio.gather(*(use(store) for store in stores)))


class SiwxNonceContract(StoreContractBase):
    """Part of ``StoreContract``: sign-in-with-x nonces, used once."""

    async def test_siwx_nonce_is_used_once(self, store: Store) -> None:
        nonce = new_nonce()
        await use_nonce(store, nonce, payer=PAYER, valid_until=VALID_UNTIL)
        with pytest.raises(SiwxNonceUsed):
            await use_nonce(store, nonce, payer=PAYER, valid_until=VALID_UNTIL)
        with pytest.raises(SiwxNonceUsed):  # another wallet cannot take it either
            await use_nonce(store, nonce, payer=PAYER.replace("A1", "B2"), valid_until=VALID_UNTIL)
        await use_nonce(store, new_nonce(), payer=PAYER, valid_until=VALID_UNTIL)

    async def test_siwx_nonce_racing_uses_have_one_winner(self, store: Store) -> None:
        won = await uses([store] * RACERS, new_nonce())
        assert won.count(True) == 1, won

    async def test_siwx_nonce_is_pruned_only_once_its_message_expired(self, store: Store) -> None:
        nonce = new_nonce()
        await use_nonce(store, nonce, payer=PAYER, valid_until=VALID_UNTIL)
        assert await store.prune_tasks(before=VALID_UNTIL) == 0  # (the skew still accepts it)
        with pytest.raises(SiwxNonceUsed):
            await use_nonce(store, nonce, payer=PAYER, valid_until=VALID_UNTIL)
        assert await store.prune_tasks(before=VALID_UNTIL + CLOCK_SKEW_SECONDS + 1) == 1

    async def test_siwx_nonce_racing_uses_across_instances_have_one_winner(
        self, store: Store, second: Store
    ) -> None:
        won = await uses([store, second] * (RACERS // 2), new_nonce())
        assert won.count(True) == 1, won
