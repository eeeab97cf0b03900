"""The facilitator settler asks the token before it asks the facilitator to settle.

With an RPC of its own x402srv simulates ``transferWithAuthorization`` (one
``eth_call``) instead of a ``/verify`` round trip; without one it asks
``/verify``. Each case runs the real settler against the real local facilitator
on anvil; a transport under the settler's client records which facilitator
paths were asked (it forwards every request unchanged).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
from eth_account import Account

from x402srv.access.recovery import RECEIPT_REUSE_SECONDS
from x402srv.config.models import Config, parse_config
from x402srv.default_plugins.facilitator import FacilitatorOptions, FacilitatorSettler
from x402srv.devchain import Devchain, sign_transfer_authorization
from x402srv.interfaces import Rejected, Settled, SettlementRequest, Unknown
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.transfer_call import transfer_calldata
from x402srv.testing.buyers import settlement_request
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import free_port, seller_config
from x402srv.wire.reasons import Reason

PRICE = 100_000


class PathRecorder(httpx.AsyncBaseTransport):
    """Forwards to the real facilitator and keeps the path of each request."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class RpcRecorder(httpx.AsyncBaseTransport):
    """Forwards to the real node and keeps the JSON-RPC method of each request."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.methods: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.methods.append(json.loads(await request.aread())["method"])
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class Hooks:
    def __init__(self) -> None:
        self.noted: list[str] = []

    async def note_broadcast(self, tx_hash: str) -> None:
        self.noted.append(tx_hash)

    async def note(self, reason: str) -> None:
        return None


def _request(
    devchain: Devchain, seller: str, payer: Any, facilitator_url: str = "http://127.0.0.1:1"
) -> tuple[Config, SettlementRequest]:
    config = parse_config(
        seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=seller,
            store={"backend": "memory"},
            settlement={"strategy": "facilitator", "facilitator_url": facilitator_url},
            asset_name=devchain.token.name,
            asset_version=devchain.token.version,
        ),
        env={},
    )
    signature, authorization = sign_transfer_authorization(
        payer,
        devchain.token,
        to=seller,
        value=PRICE,
        valid_after=0,
        valid_before=devchain.block_timestamp() + 600,
    )
    return config, settlement_request(config, signature, authorization)


@asynccontextmanager
async def _settler(
    config: Config, chain: ChainReader | None, **options: Any
) -> AsyncIterator[tuple[FacilitatorSettler, PathRecorder]]:
    recorder = PathRecorder()
    settler = FacilitatorSettler(config, FacilitatorOptions(**options), chain, transport=recorder)
    await settler.start()
    try:
        yield settler, recorder
    finally:
        await settler.close()


@pytest.fixture
async def chain(devchain: Devchain) -> AsyncIterator[ChainReader]:
    reader = ChainReader(devchain.rpc_url)
    await reader.open()
    yield reader
    await reader.close()


@pytest.fixture
async def recorded(devchain: Devchain) -> AsyncIterator[tuple[RpcRecorder, ChainReader]]:
    """A chain reader whose every JSON-RPC call the test can count."""
    rpc = RpcRecorder()
    async with httpx.AsyncClient(transport=rpc) as client:
        yield rpc, ChainReader(devchain.rpc_url, client=client)


async def test_simulate_tells_a_revert_from_success(devchain: Devchain, chain: ChainReader) -> None:
    seller = Account.create().address
    funded = devchain.new_account(eth=0, usdc_atomic=PRICE)
    broke = devchain.new_account(eth=0, usdc_atomic=0)
    for payer, expected in ((funded, None), (broke, "exceeds balance")):
        _, request = _request(devchain, seller, payer)
        data = "0x" + transfer_calldata(request.authorization).hex()
        reverted = await chain.simulate(devchain.token.address, data)
        if expected is None:
            assert reverted is None
        else:
            assert reverted is not None and expected in reverted
    assert devchain.balance_of(seller) == 0  # a simulation moves nothing

    down = ChainReader(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(ChainUnavailable):
        await down.simulate(devchain.token.address, "0x")
    await down.close()


async def test_unfunded_payment_never_reaches_the_facilitator(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    chain: ChainReader,
) -> None:
    process = facilitator()
    broke = devchain.new_account(eth=0, usdc_atomic=0)
    config, request = _request(devchain, Account.create().address, broke, process.url)
    block = devchain.rpc.block_number()
    async with _settler(config, chain) as (settler, recorder):
        outcome = await settler.settle(request, Hooks())
    assert isinstance(outcome, Rejected)
    assert outcome.reason == Reason.INSUFFICIENT_BALANCE
    assert recorder.paths == ["/supported"]  # neither /verify nor /settle
    assert devchain.rpc.block_number() == block  # no reverted transfer mined


@pytest.mark.parametrize(
    ("with_rpc", "verify_before_settle", "expected"),
    [
        (True, None, ["/supported", "/settle"]),  # simulated on our RPC instead
        (False, None, ["/supported", "/verify", "/settle"]),  # nothing to simulate on
        (True, True, ["/supported", "/verify", "/settle"]),
        (False, False, ["/supported", "/settle"]),
    ],
)
async def test_which_facilitator_calls_a_purchase_makes(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    chain: ChainReader,
    with_rpc: bool,
    verify_before_settle: bool | None,
    expected: list[str],
) -> None:
    process = facilitator()
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    hooks = Hooks()
    async with _settler(
        config, chain if with_rpc else None, verify_before_settle=verify_before_settle
    ) as (settler, recorder):
        outcome = await settler.settle(request, hooks)
    assert isinstance(outcome, Settled), outcome
    # Confirmed on our RPC (or, without one, taken at its word): the txHash reaches the
    # record with PAID, so no hint is written on its own first.
    assert hooks.noted == []
    assert recorder.paths == expected
    assert devchain.balance_of(seller) == PRICE


async def test_rpc_down_falls_back_to_verify(
    devchain: Devchain, facilitator: Callable[..., FacilitatorProcess]
) -> None:
    """No simulation possible: /verify checks the payment; the outcome waits for the chain."""
    process = facilitator()
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    down = ChainReader(f"http://127.0.0.1:{free_port()}", timeout=2)
    async with _settler(config, down) as (settler, recorder):
        outcome = await settler.settle(request, Hooks())
    await down.close()
    assert recorder.paths == ["/supported", "/verify", "/settle"]
    # settled, but not confirmable on our RPC: Unknown with its txHash, decided later
    assert isinstance(outcome, Unknown) and outcome.tx_hash is not None
    assert devchain.balance_of(seller) == PRICE


@pytest.mark.parametrize("watch", [True, False])
async def test_a_transfer_the_chain_shows_does_not_wait_for_a_late_answer(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    chain: ChainReader,
    watch: bool,
) -> None:
    """The 100 ms stall of issue 25: a facilitator answers /settle only once it sees its
    receipt (the official SDK's polls every 100 ms), long after the block was mined. With
    the chain watched the buyer's wait ends when the chain shows the transfer; without, it
    ends with the answer. Here the answer comes 3 s after a transfer mined at once."""
    process = facilitator("settle-answer-late", delay=3.0)
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    hooks = Hooks()
    after = 0.02 if watch else 0.0
    async with _settler(config, chain, watch_chain_after_seconds=after) as (settler, recorder):
        started = time.monotonic()
        outcome = await settler.settle(request, hooks)
        took = time.monotonic() - started
    assert isinstance(outcome, Settled), outcome
    assert outcome.payer.lower() == payer.address.lower()
    assert hooks.noted == []  # confirmed from its receipt: recorded with PAID
    assert recorder.paths == ["/supported", "/settle"]
    assert devchain.balance_of(seller) == PRICE
    receipt = await chain.receipt(outcome.tx_hash)
    assert receipt is not None and receipt.status == 1
    if watch:
        assert took < 1.5, f"waited {took:.2f} s for an answer the chain had made moot"
    else:
        assert took >= 3.0


async def test_the_settlers_receipt_is_not_read_again_to_check_it(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    recorded: tuple[RpcRecorder, ChainReader],
) -> None:
    """The settler confirms its transaction on the shared reader; the pipeline's check of
    the txHash (flow step 9) reuses that read instead of a second round trip. Only what
    the node answered is kept: a hash never read, or not mined, is asked for."""
    process = facilitator()
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    rpc, chain = recorded
    async with _settler(config, chain) as (settler, _):
        outcome = await settler.settle(request, Hooks())
    assert isinstance(outcome, Settled), outcome
    read = rpc.methods.count("eth_getTransactionReceipt")
    assert read >= 1  # the settler's confirmation
    auth = request.authorization
    reused = await chain.receipt(outcome.tx_hash.upper(), read_within=RECEIPT_REUSE_SECONDS)
    assert reused is not None
    assert reused.settles(devchain.token.address, auth.payer, seller, PRICE, auth.nonce)
    assert rpc.methods.count("eth_getTransactionReceipt") == read
    assert await chain.receipt(outcome.tx_hash) == reused  # not asked to reuse: asked
    assert rpc.methods.count("eth_getTransactionReceipt") == read + 1
    unknown = "0x" + "11" * 32
    for _ in range(2):
        assert await chain.receipt(unknown, read_within=RECEIPT_REUSE_SECONDS) is None
    assert rpc.methods.count("eth_getTransactionReceipt") == read + 3


async def test_a_precheck_then_settle_asks_the_token_once(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    recorded: tuple[RpcRecorder, ChainReader],
) -> None:
    """The pipeline runs ``precheck`` while it writes the hand-over; ``settle`` then
    trusts it (``prechecked``) instead of simulating the same transfer again."""
    process = facilitator()
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    rpc, chain = recorded
    # (the chain not watched while /settle is out: its reads would be eth_calls too)
    async with _settler(config, chain, watch_chain_after_seconds=0) as (settler, recorder):
        assert await settler.precheck(request) is None
        outcome = await settler.settle(replace(request, prechecked=True), Hooks())
    assert isinstance(outcome, Settled), outcome
    assert rpc.methods.count("eth_call") == 1  # the precheck's simulation alone
    assert recorder.paths == ["/supported", "/settle"]
    assert devchain.balance_of(seller) == PRICE


async def test_a_precheck_refuses_an_unfunded_payer_and_cannot_tell_without_an_rpc(
    devchain: Devchain, facilitator: Callable[..., FacilitatorProcess], chain: ChainReader
) -> None:
    process = facilitator()
    broke = devchain.new_account(eth=0, usdc_atomic=0)
    config, request = _request(devchain, Account.create().address, broke, process.url)
    async with _settler(config, chain) as (settler, recorder):
        refused = await settler.precheck(request)
    assert isinstance(refused, Rejected) and refused.reason == Reason.INSUFFICIENT_BALANCE
    assert recorder.paths == ["/supported"]
    async with _settler(config, None) as (settler, _):
        with pytest.raises(ChainUnavailable):  # the pipeline lets settle check as it would
            await settler.precheck(request)


class SilentNode:
    """A real TCP server that takes every connection and never answers: a hung RPC node.

    It keeps what arrived, so a test can count the JSON-RPC calls sent to it.
    """

    def __init__(self) -> None:
        self.received = bytearray()
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def calls(self, method: str) -> int:
        return bytes(self.received).count(f'"{method}"'.encode())

    async def __aenter__(self) -> SilentNode:
        self._server = await asyncio.start_server(self._take, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._held:
            writer.close()
        await self._server.wait_closed()

    async def _take(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._held.append(writer)
        while chunk := await reader.read(65536):
            self.received += chunk


async def test_a_precheck_that_met_a_hung_node_sends_settle_straight_to_verify(
    devchain: Devchain, facilitator: Callable[..., FacilitatorProcess]
) -> None:
    """The node hangs: the pipeline's ``precheck`` waits out the RPC timeout and cannot
    tell. ``settle`` (``precheck_failed``) then asks ``/verify`` at once instead of
    sending the same simulation to the same node and waiting out a second timeout."""
    process = facilitator()
    payer = devchain.new_account(eth=0, usdc_atomic=PRICE)
    seller = Account.create().address
    config, request = _request(devchain, seller, payer, process.url)
    async with SilentNode() as node:
        hung = ChainReader(node.url, timeout=1)
        # (the chain not watched while /settle is out: its reads would be eth_calls too)
        async with _settler(config, hung, watch_chain_after_seconds=0) as (settler, recorder):
            with pytest.raises(ChainUnavailable):
                await settler.precheck(request)
            assert node.calls("eth_call") == 1
            failed = replace(request, precheck_failed=True)
            outcome = await settler.settle(failed, Hooks())
        await hung.close()
    assert node.calls("eth_call") == 1  # the precheck's alone: settle did not ask again
    assert recorder.paths == ["/supported", "/verify", "/settle"]
    # settled, but not confirmable on the hung node: Unknown with its txHash, decided later
    assert isinstance(outcome, Unknown) and outcome.tx_hash is not None
    assert devchain.balance_of(seller) == PRICE
