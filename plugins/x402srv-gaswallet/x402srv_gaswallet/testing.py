"""Test helpers for the gas-wallet settler (need x402srv's ``test`` extra and anvil).

Configs for the devchain, payment requests signed like an x402 buyer, hooks
that record what the settler notes, ``SettlerRig`` (one test's wallet, seller
and buyer with the checks that read the chain) and ``RpcRelay``, a real HTTP
hop that a test can break. Shipped in the package, like ``x402srv.testing``, because the
project's tests import helpers by module path (``--import-mode=importlib``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import httpx
from aiohttp import web
from eth_account.signers.local import LocalAccount

from x402srv.config.models import Config, parse_config
from x402srv.devchain import Devchain, sign_transfer_authorization
from x402srv.plugin import ChainReader, SettlementRequest, Store
from x402srv.testing.buyers import settlement_request as request_from

if TYPE_CHECKING:
    from .settler import GasWalletSettler

__all__ = [
    "PRICE",
    "Configure",
    "RecordingHooks",
    "RpcRelay",
    "SettlerRig",
    "StartSettler",
    "key_hex",
    "make_config",
    "manual_mining",
    "nonce_of",
    "request_from",
    "signed_request",
    "tx_nonce",
]

PRICE = 10_000  # $0.01 in 6-decimal units

#: ``await start_settler(config, *, store=None, chain=<reader>, options=None)``
StartSettler = Callable[..., Awaitable["GasWalletSettler"]]
#: ``configure(**make_config options)`` with a test's wallet and seller filled in.
Configure = Callable[..., Config]


def key_hex(account: LocalAccount) -> str:
    return "0x" + bytes(account.key).hex()


def make_config(
    devchain: Devchain,
    *,
    gas_key: str | None,
    seller: str,
    rpc_url: str | None = None,
    network: str | None = None,
    options: Mapping[str, Any] | None = None,
    lease_seconds: int = 120,
    store: Mapping[str, Any] | None = None,
    strategy: str | None = "gas-wallet",
) -> Config:
    """A real, validated seller config for the devchain (a custom ``eip155`` network)."""
    settlement: dict[str, Any] = {"lease_seconds": lease_seconds}
    if strategy is not None:
        settlement["strategy"] = strategy
    if gas_key is not None:
        settlement["gas_wallet_private_key"] = gas_key
    if options is not None:
        settlement["gas-wallet"] = dict(options)
    network_table: dict[str, Any] = {
        "asset": devchain.token.address,
        "asset_name": devchain.token.name,
        "asset_version": devchain.token.version,
        "decimals": devchain.token.decimals,
    }
    if rpc_url is not None:
        network_table["rpc_url"] = rpc_url
    return parse_config(
        {
            "seller": {
                "agent_name": "Gas wallet tests",
                "agent_description": "Settles on anvil",
                "agent_url": "https://seller.example",
                "provider_name": "Example",
                "provider_url": "https://example.com",
                "wallet_address": seller,
                "network": network or devchain.network,
            },
            "plans": [{"plan_id": "basic", "unit_amount": "$0.01", "description": "One"}],
            "store": dict(store or {"backend": "memory"}),
            "settlement": settlement,
            "credentials": {"secret": "gas-wallet-tests-jwt-secret-32-bytes!"},
            "network": network_table,
        },
        env={},
    )


def signed_request(
    devchain: Devchain,
    config: Config,
    payer: LocalAccount,
    *,
    value: int = PRICE,
    valid_after: int = 0,
    valid_before: int | None = None,
    challenge: str = "c1",
) -> SettlementRequest:
    """A payment of ``value`` from ``payer`` to the seller, signed like an x402 buyer."""
    before = valid_before if valid_before is not None else devchain.block_timestamp() + 600
    signature, authorization = sign_transfer_authorization(
        payer,
        devchain.token,
        to=config.seller.wallet_address,
        value=value,
        valid_after=valid_after,
        valid_before=before,
    )
    return request_from(config, signature, authorization, challenge=challenge)


class RecordingHooks:
    """The pipeline's hooks persist the txHash in the store; these keep it in a list.

    They also ask the node whether it already knows the transaction when it is
    noted: the hash must be recorded before the bytes leave.
    """

    def __init__(self, chain: ChainReader) -> None:
        self.chain = chain
        self.noted: list[str] = []
        self.known_when_noted: list[bool] = []

    async def note_broadcast(self, tx_hash: str) -> None:
        self.noted.append(tx_hash)
        found = await self.chain.call("eth_getTransactionByHash", [tx_hash])
        self.known_when_noted.append(found is not None)

    async def note(self, reason: str) -> None:
        return None  # a history line of the record: there is no record here


@contextmanager
def manual_mining(devchain: Devchain) -> Iterator[None]:
    """Blocks only on ``mine()``. Enter it after set-up: minting waits for receipts."""
    devchain.rpc.call("evm_setAutomine", [False])
    try:
        yield
    finally:
        devchain.rpc.call("evm_setAutomine", [True])


def nonce_of(devchain: Devchain, address: str, block: str = "pending") -> int:
    return int(devchain.rpc.call("eth_getTransactionCount", [address, block]), 16)


def tx_nonce(devchain: Devchain, tx_hash: str) -> int:
    return int(devchain.rpc.call("eth_getTransactionByHash", [tx_hash])["nonce"], 16)


class RpcRelay:
    """A real HTTP hop in front of anvil that a test can break.

    ``stop()`` closes its port (connection refused: a request certainly never
    left). With ``withhold_sends`` set it forwards ``eth_sendRawTransaction`` to
    anvil and then keeps the reply until ``release`` is set, so the client's
    request times out although the transaction is out: a send whose fate the
    client cannot know. Faking either inside the client would test nothing.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.withhold_sends = False
        self.release = asyncio.Event()
        self.forwarded_sends = 0
        self._runner: web.AppRunner | None = None
        self._http = httpx.AsyncClient(timeout=10)
        self.url = ""

    async def start(self) -> RpcRelay:
        app = web.Application()
        # Any path, like hosted RPCs whose URL carries the API key (/v2/<key>).
        app.router.add_post("/{path:.*}", self._relay)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def stop(self) -> None:
        self.release.set()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def aclose(self) -> None:
        await self.stop()
        await self._http.aclose()

    async def _relay(self, request: web.Request) -> web.Response:
        body = await request.read()
        answer = await self._http.post(
            self.upstream, content=body, headers={"Content-Type": "application/json"}
        )
        method = json.loads(body).get("method")
        if method == "eth_sendRawTransaction":
            self.forwarded_sends += 1
            if self.withhold_sends:
                with contextlib.suppress(asyncio.CancelledError):
                    await self.release.wait()
        return web.Response(body=answer.content, content_type="application/json")


@dataclass(frozen=True)
class SettlerRig:
    """One test's gas wallet, seller and buyer on the session's anvil, and its settlers.

    ``config`` pays the seller from ``gas_account``'s key over anvil's RPC;
    ``start`` builds settlers through the plugin's factory (``start_settler``
    closes them at teardown). The checks read the chain, never the settler.
    """

    devchain: Devchain
    chain: ChainReader
    gas_account: LocalAccount
    config: Config
    #: ``configure(**overrides)``: another config for this wallet and seller (``make_config``).
    configure: Configure
    start_settler: StartSettler

    @property
    def seller(self) -> str:
        return self.config.seller.wallet_address

    @cached_property
    def buyer(self) -> LocalAccount:
        """A payer with 100 test USDC and no ETH (made when first asked for)."""
        return self.devchain.new_account(eth=0)

    async def start(
        self,
        config: Config | None = None,
        *,
        store: Store | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> GasWalletSettler:
        """A started settler for ``config`` (this rig's unless given), on a memory store
        unless given one, with the ``[settlement.gas-wallet]`` options of its config unless
        given ``options``."""
        return await self.start_settler(config or self.config, store=store, options=options)

    def request(self, payer: LocalAccount | None = None, **fields: Any) -> SettlementRequest:
        """A payment to the seller signed by ``payer`` (the buyer unless given)."""
        return signed_request(self.devchain, self.config, payer or self.buyer, **fields)

    def hooks(self) -> RecordingHooks:
        return RecordingHooks(self.chain)

    def gas_nonce(self, block: str = "pending") -> int:
        """How many transactions the gas wallet sent (``pending``: the pool's too)."""
        return nonce_of(self.devchain, self.gas_account.address, block)

    def received(self) -> int:
        """The seller's token balance (each rig's seller starts with none)."""
        return self.devchain.balance_of(self.seller)

    def assert_nothing_moved(self, request: SettlementRequest) -> None:
        """Nothing left the gas wallet, the seller got nothing, the authorization is unused."""
        assert self.gas_nonce() == 0, "the gas wallet sent a transaction"
        assert self.received() == 0, "the seller was paid"
        authorization = request.authorization
        assert not self.devchain.authorization_state(authorization.payer, authorization.nonce)
