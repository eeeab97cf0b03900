"""Settler ``relayer``: a relaying account pays the gas, through the signer that holds its key.

For sellers who keep no gas key in x402srv: a signer they run (Web3Signer, a
node with a managed account; on a test chain, anvil) holds the relaying
account's key and signs ``eth_sendTransaction`` for it. This settler asks it to
send the buyer's ``transferWithAuthorization``, and lets the chain decide:

    preflight: the token would refuse (balance, signature)    -> Rejected, nothing sent
    preflight: already spent, and it paid us                  -> Settled (that transaction)
    the chain cannot be read before sending                   -> Rejected, nothing sent
    the signer cannot be reached (connection refused)         -> Rejected, nothing left here
    the signer answers with a JSON-RPC error                  -> Rejected, it sent nothing
    a timeout or dropped connection after the request left    -> Unknown: the chain decides
    a txHash                                                  -> noted, its receipt awaited,
                                                                 then the chain's verdict

Only ``Rejected`` releases the buyer's claim, so it is answered only when
nothing of this attempt can reach the chain; everything else is ``Unknown``,
which the core resolves from the chain and never settles twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from pydantic import Field

from x402srv.plugin import (
    BaseSettler,
    ChainReader,
    ChainUnavailable,
    ConfigError,
    PluginContext,
    PluginOptions,
    Reason,
    Register,
    Rejected,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Unknown,
    from_chain,
    hookimpl,
    preflight,
    transfer_calldata,
)

__all__ = ["RelayerOptions", "RelayerSettler", "build_relayer", "register_settlers"]


class RelayerOptions(PluginOptions):
    """``[settlement.relayer]``"""

    #: The JSON-RPC endpoint that signs for ``account`` (not the chain's public RPC).
    signer_url: str = Field(pattern=r"^https?://")
    #: The relaying account: it sends the transaction and pays its gas.
    account: str = Field(pattern=r"^0x[0-9a-fA-F]{40}$")
    timeout_seconds: float = Field(default=10, gt=0)
    receipt_timeout_seconds: float = Field(default=30, gt=0)
    poll_interval_seconds: float = Field(default=0.2, gt=0)


class RelayerSettler(BaseSettler):
    name = "relayer"

    def __init__(self, options: RelayerOptions, chain: ChainReader) -> None:
        self.options = options
        self.chain = chain  # the core's reader: it opens and closes it, not us
        self._signer: httpx.AsyncClient | None = None

    async def start(self) -> None:
        self._signer = httpx.AsyncClient(timeout=self.options.timeout_seconds)

    async def close(self) -> None:
        if self._signer is not None:
            await self._signer.aclose()
            self._signer = None

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        try:
            return await self._settle(request, hooks)
        except Exception as exc:  # must not raise: after a send only the chain knows
            return Unknown(f"relayer settler failed ({type(exc).__name__})")

    async def _settle(
        self, request: SettlementRequest, hooks: SettlementHooks
    ) -> SettlementOutcome:
        try:
            refused = await preflight(self.chain, request)  # one eth_call, nothing sent
        except ChainUnavailable:
            return Rejected(Reason.UNEXPECTED_SETTLE_ERROR, "The chain cannot be read now.")
        if refused is not None:
            return refused
        sent = await self._send(request)
        if not isinstance(sent, str):
            return sent
        await hooks.note_broadcast(sent)  # stored on the record before we wait
        return await self._confirm(request, sent)

    async def _send(self, request: SettlementRequest) -> str | SettlementOutcome:
        """Ask the signer to send the call: its txHash, or the outcome of its failure."""
        assert self._signer is not None, "start() was not called"
        transaction = {
            "from": self.options.account,
            "to": request.network.asset,
            "data": "0x" + transfer_calldata(request.authorization).hex(),
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendTransaction", "params": [transaction]}
        try:
            response = await self._signer.post(self.options.signer_url, json=body)
        except httpx.ConnectError:
            return Rejected(Reason.UNEXPECTED_SETTLE_ERROR, "The relayer cannot be reached.")
        except httpx.HTTPError as exc:  # the request may have left: the chain decides
            return Unknown(f"relayer did not answer ({type(exc).__name__})")
        answer: dict[str, Any] = response.json() if response.is_success else {}
        if "error" in answer:
            return Rejected(Reason.UNEXPECTED_SETTLE_ERROR, "The relayer refused to send.")
        tx_hash = answer.get("result")
        if not isinstance(tx_hash, str):
            return Unknown(f"relayer answered HTTP {response.status_code} without a txHash")
        return tx_hash

    async def _confirm(self, request: SettlementRequest, tx_hash: str) -> SettlementOutcome:
        """Wait for the receipt, then let the chain say what happened to the authorization."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.receipt_timeout_seconds
        while True:
            try:
                if await self.chain.receipt(tx_hash) is not None:
                    return await from_chain(self.chain, request, tx_hint=tx_hash)
            except ChainUnavailable:
                pass  # a node hiccup: ask again until the deadline
            if loop.time() >= deadline:
                return Unknown("no receipt in time", tx_hash)
            await asyncio.sleep(self.options.poll_interval_seconds)


def build_relayer(ctx: PluginContext) -> RelayerSettler:
    """The factory ``[settlement] strategy = "relayer"`` selects; opens nothing."""
    options = ctx.parse_options(RelayerOptions)
    if ctx.chain is None:
        raise ConfigError("the relayer settler reads the chain: set it", path="settlement.rpc_url")
    # settle() runs under the attempt's lease (lease_seconds - 2); ours must end first.
    budget = ctx.config.settlement.lease_seconds - 2
    if options.timeout_seconds + options.receipt_timeout_seconds >= budget:
        raise ConfigError(
            f"timeout_seconds + receipt_timeout_seconds must stay under {budget} s",
            path=f"{ctx.key_path}.receipt_timeout_seconds",
        )
    return RelayerSettler(options, ctx.chain)


@hookimpl
def register_settlers(register: Register[Settler]) -> None:
    register("relayer", build_relayer)
