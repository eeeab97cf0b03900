"""The ``gas-wallet`` settler: submit the buyer's authorization from our own wallet.

``settle`` never raises, and answers ``Rejected`` only when nothing of this
attempt can be on-chain (docs/protocol/flow.md, step 8;
docs/protocol/states.md):

1. Simulate ``transferWithAuthorization`` with ``eth_call`` from the gas wallet.
   A revert refuses the payment with its x402 reason, unless the authorization
   may already be spent: then the chain decides
   (``x402srv.settlement.transfer_call.judge_revert``), so
   a payment that already arrived is ``Settled`` with its original txHash.
   A node that cannot be reached refuses too: nothing was sent.
2. Gas and EIP-1559 fees are read outside the nonce gate, to keep it short, at the
   same time as the simulation (one round trip to the node instead of four).
3. Inside the gate: pick the nonce, sign, note the txHash, send
   (``broadcast.Broadcaster``).
4. Outside the gate, poll for the receipt: the exact Transfer -> ``Settled``;
   reverted -> the chain decides if the nonce is now spent, else ``Rejected``;
   no receipt in time -> ``Unknown`` with the txHash, resolved from the chain
   later. Anything unexpected -> ``Unknown`` with whatever txHash was noted.

Neither the key, the RPC URL nor raw calldata reach logs, outcomes or errors.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_typing import HexStr
from web3.exceptions import ContractLogicError
from web3.types import TxParams

from x402srv.plugin import (
    DETAILS,
    ChainReader,
    Clock,
    ConfigError,
    MalformedSignature,
    NetworkInfo,
    Reason,
    Rejected,
    Secret,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Store,
    Unknown,
    classify_revert,
    judge_revert,
    redact_url,
    transfer_calldata,
)

from .broadcast import Attempt, Broadcaster
from .nonces import NonceGate
from .options import GasWalletOptions
from .outcomes import await_receipt, judge_receipt
from .rpc import GasWalletWeb3, connect, disconnect

__all__ = ["GasWalletSettler"]

log = logging.getLogger("x402srv_gaswallet")

_GAS_HEADROOM = 1.25


class GasWalletSettler:
    """Settles x402 ``exact`` EVM payments by sending them from the seller's wallet."""

    name = "gas-wallet"

    def __init__(
        self,
        *,
        account: LocalAccount,
        rpc_url: str,
        network: NetworkInfo,
        options: GasWalletOptions,
        store: Store | None,
        chain: ChainReader | None,
        clock: Clock,
    ) -> None:
        self._account = account
        self.address: str = account.address
        # Only what is needed: NetworkInfo's repr would show the RPC URL.
        self.chain_id = network.chain_id
        self.network = network.caip2
        # A Secret, so no repr or debug dump of the settler shows the URL.
        self._rpc_url = Secret(rpc_url, "rpc_url")
        self._options = options
        self._owns_chain = chain is None
        self._chain = chain or ChainReader(rpc_url, timeout=options.rpc_timeout_seconds)
        self._w3: GasWalletWeb3 | None = None
        gate = NonceGate(
            store=store,
            chain_id=network.chain_id,
            address=account.address,
            lease_seconds=options.nonce_lease_seconds,
            rpc_timeout=options.rpc_timeout_seconds,
            clock=clock,
            pending_count=self._pending_count,
        )
        self._broadcaster = Broadcaster(account, gate, retries=options.nonce_retries)

    def __repr__(self) -> str:
        return f"GasWalletSettler(address={self.address}, network={self.network})"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect and make sure the node serves the configured chain: all or nothing."""
        if self._w3 is not None:
            return
        url = self._rpc_url.reveal()
        w3 = await connect(url, request_timeout=self._options.rpc_timeout_seconds)
        where = redact_url(url)
        try:
            chain_id = await w3.eth.chain_id
        except Exception as exc:
            await disconnect(w3)
            raise ConfigError(
                f"the RPC node at {where} cannot be reached ({type(exc).__name__})",
                path="settlement.rpc_url",
            ) from None
        except BaseException:  # (cancelled while it asked: nothing is left open)
            await disconnect(w3)
            raise
        if chain_id != self.chain_id:
            await disconnect(w3)
            raise ConfigError(
                f"the RPC node at {where} serves chain {chain_id}, but network "
                f"{self.network} is chain {self.chain_id}",
                path="settlement.rpc_url",
            )
        if self._owns_chain:
            try:
                await self._chain.open()
            except BaseException:  # (all or nothing: a later start tries again)
                await disconnect(w3)
                raise
        self._w3 = w3
        log.info("gas wallet %s ready on %s", self.address, self.network)

    async def close(self) -> None:
        w3, self._w3 = self._w3, None
        if w3 is not None:
            await disconnect(w3)
        if self._owns_chain:
            await self._chain.close()

    async def gas_balance(self) -> int:
        """The wallet's native balance in wei (readiness: can it still pay for gas?)."""
        return int(await self._web3().eth.get_balance(self._account.address, "latest"))

    async def senders(self) -> frozenset[str]:
        """Where its transactions come from: the wallet (a failover names it by this)."""
        return frozenset({self.address.lower()})

    async def check_ready(self) -> str | None:
        """For ``/readyz``: None when the node answers and the balance covers gas."""
        balance = await self.gas_balance()
        if balance < self._options.min_balance_wei:
            return f"gas wallet balance {balance} wei is below {self._options.min_balance_wei}"
        return None

    # ------------------------------------------------------------ settle

    async def settle(self, request: SettlementRequest, hooks: SettlementHooks) -> SettlementOutcome:
        attempt = Attempt(request.challenge_id)
        try:
            return await self._settle(request, hooks, attempt)
        except Exception as exc:
            log.error(
                "challenge %s: gas-wallet settlement failed unexpectedly (%s); outcome unknown",
                request.challenge_id,
                type(exc).__name__,
            )
            return Unknown(f"gas-wallet settlement error ({type(exc).__name__})", attempt.tx_hash)

    async def _settle(
        self, request: SettlementRequest, hooks: SettlementHooks, attempt: Attempt
    ) -> SettlementOutcome:
        # One connection for the whole settlement: a close that lands meanwhile (x402srv
        # stopping) makes its later requests fail as never sent, not find no connection.
        w3 = self._w3
        if w3 is None:
            return Rejected(
                Reason.UNEXPECTED_SETTLE_ERROR,
                "The gas-wallet settler is not started.",
                settler_failed=True,
            )
        try:
            data = transfer_calldata(request.authorization)
        except MalformedSignature:
            return Rejected(Reason.INVALID_SIGNATURE, DETAILS[Reason.INVALID_SIGNATURE])
        prepared = await self._prepare(w3, request, data)
        if not isinstance(prepared, dict):
            return prepared
        refused = await self._broadcaster.send(w3, prepared, hooks, attempt)
        if refused is not None:
            return refused
        assert attempt.tx_hash is not None
        receipt = await await_receipt(
            self._chain,
            attempt.tx_hash,
            within=self._options.receipt_timeout_seconds,
            poll=self._options.poll_interval_seconds,
        )
        if receipt is None:
            log.warning(
                "challenge %s: no receipt for %s within %g s; the chain decides later",
                request.challenge_id,
                attempt.tx_hash,
                self._options.receipt_timeout_seconds,
            )
            return Unknown("no receipt in time", attempt.tx_hash)
        return await judge_receipt(self._chain, request, receipt)

    async def _prepare(
        self, w3: GasWalletWeb3, request: SettlementRequest, data: bytes
    ) -> dict[str, Any] | SettlementOutcome:
        """Simulate, then the unsigned transaction (all but the nonce), or why not."""
        call: TxParams = {
            "from": self._account.address,
            "to": w3.to_checksum_address(request.network.asset),
            "data": HexStr("0x" + data.hex()),
        }
        # The simulation, the gas estimate and the fee reads go out together: each is a
        # round trip to the node, and none needs another's answer (four in a row were
        # most of a purchase's wait on a local chain).
        simulated, estimated, fees = await asyncio.gather(
            w3.eth.call(call, "latest"), self._gas(w3, call), self._fees(w3), return_exceptions=True
        )
        # The simulation's revert speaks first: its message is what the payment is judged on.
        for failed in (simulated, estimated, fees):
            if isinstance(failed, BaseException) and not isinstance(failed, Exception):
                raise failed  # cancelled: the lease ran out
            if isinstance(failed, ContractLogicError):
                return await judge_revert(
                    self._chain, request, classify_revert(failed.message or "")
                )
            if isinstance(failed, BaseException):
                log.warning(
                    "challenge %s: node unusable before sending (%s); nothing sent",
                    request.challenge_id,
                    type(failed).__name__,
                )
                return Rejected(
                    Reason.UNEXPECTED_SETTLE_ERROR,
                    "The settlement node could not be reached; nothing was sent.",
                    settler_failed=True,  # another settler of the network may get through
                )
        assert isinstance(estimated, int)
        assert not isinstance(fees, BaseException)
        gas = estimated
        if fees is None:
            log.warning(
                "challenge %s: base fee above max_fee_per_gas_gwei; nothing sent",
                request.challenge_id,
            )
            return Rejected(
                Reason.UNEXPECTED_SETTLE_ERROR,
                "Gas is above the seller's price cap; nothing was sent.",
                settler_failed=True,
            )
        return {
            "type": 2,
            "chainId": self.chain_id,
            "to": call["to"],
            "value": 0,
            "data": data,
            "gas": gas,
            "maxFeePerGas": fees[0],
            "maxPriorityFeePerGas": fees[1],
        }

    async def _gas(self, w3: GasWalletWeb3, call: TxParams) -> int:
        """The configured gas limit, else the node's estimate plus headroom."""
        if self._options.gas_limit:
            return self._options.gas_limit
        return int(await w3.eth.estimate_gas(call) * _GAS_HEADROOM)

    async def _fees(self, w3: GasWalletWeb3) -> tuple[int, int] | None:
        """(maxFeePerGas, maxPriorityFeePerGas), or None when the cap is below the base fee."""
        block, suggested = await asyncio.gather(w3.eth.get_block("latest"), w3.eth.max_priority_fee)
        base = int(block["baseFeePerGas"])
        tip = int(suggested)
        max_fee = 2 * base + tip
        cap = self._options.max_fee_per_gas_wei
        if cap is not None:
            if cap <= base:
                return None
            tip = min(tip, cap - base)
            max_fee = min(max_fee, cap)
        return max_fee, tip

    async def _pending_count(self) -> int:
        return int(await self._web3().eth.get_transaction_count(self._account.address, "pending"))

    def _web3(self) -> GasWalletWeb3:
        if self._w3 is None:
            raise RuntimeError("the gas-wallet settler is not started")
        return self._w3
