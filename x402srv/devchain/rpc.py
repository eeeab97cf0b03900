"""A minimal synchronous JSON-RPC client for the local chain.

The core package may not depend on web3.py, and the devchain only needs a dozen methods:
reads, one way to send a locally signed EIP-1559 transaction, and anvil's time/balance
cheat codes. Synchronous on purpose: it drives set-up and assertions in tests, the demo
and benchmarks, never the server's event loop.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from x402srv.devchain.errors import RpcError, TransactionFailedError

BlockId = int | str
"""A block number or a tag such as "latest" / "pending"."""

# Fallback tip when the node does not implement eth_maxPriorityFeePerGas.
_DEFAULT_PRIORITY_FEE = 1_000_000_000


@dataclass(frozen=True)
class Receipt:
    """The fields of a transaction receipt the devchain callers use."""

    tx_hash: str
    block_number: int
    status: int
    gas_used: int
    contract_address: str | None
    logs: list[dict[str, Any]]


def _block(block: BlockId) -> str:
    return hex(block) if isinstance(block, int) else block


class RpcClient:
    """JSON-RPC over HTTP with typed errors; safe to share between threads."""

    def __init__(
        self, url: str, *, timeout: float = 10.0, http: httpx.Client | None = None
    ) -> None:
        self.url = url
        self._http = http or httpx.Client(timeout=timeout)
        self._owns_http = http is None
        self._ids = itertools.count(1)
        # Nonces come from eth_getTransactionCount("pending"); serialising sends keeps two
        # threads from signing the same nonce for one account.
        self._send_lock = threading.Lock()

    # -- transport ---------------------------------------------------------------------

    def call(self, method: str, params: Sequence[Any] = ()) -> Any:
        """Call `method` and return its `result`, or raise RpcError with the node's message."""
        request = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        response = self._http.post(self.url, json=request)
        response.raise_for_status()
        body = response.json()
        error = body.get("error")
        if error is not None:
            raise RpcError(
                method, int(error.get("code", 0)), str(error.get("message")), error.get("data")
            )
        return body.get("result")

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads -------------------------------------------------------------------------

    def chain_id(self) -> int:
        return int(self.call("eth_chainId"), 16)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber"), 16)

    def block_timestamp(self, block: BlockId = "latest") -> int:
        """Chain time: compare validAfter/validBefore with this, not the wall clock."""
        header = self.call("eth_getBlockByNumber", [_block(block), False])
        return int(header["timestamp"], 16)

    def get_balance(self, address: str, block: BlockId = "latest") -> int:
        return int(self.call("eth_getBalance", [address, _block(block)]), 16)

    def get_code(self, address: str, block: BlockId = "latest") -> bytes:
        return bytes.fromhex(self.call("eth_getCode", [address, _block(block)])[2:])

    def eth_call(
        self, to: str, data: bytes, *, sender: str | None = None, block: BlockId = "latest"
    ) -> bytes:
        """Run a call without mining it; reverts surface as RpcError."""
        tx: dict[str, str] = {"to": to, "data": "0x" + data.hex()}
        if sender is not None:
            tx["from"] = sender
        return bytes.fromhex(self.call("eth_call", [tx, _block(block)])[2:])

    def get_logs(
        self,
        *,
        address: str,
        topics: Sequence[str | None],
        from_block: BlockId = 0,
        to_block: BlockId = "latest",
    ) -> list[dict[str, Any]]:
        """eth_getLogs for one contract; a None topic matches anything."""
        query = {
            "address": address,
            "topics": list(topics),
            "fromBlock": _block(from_block),
            "toBlock": _block(to_block),
        }
        logs: list[dict[str, Any]] = self.call("eth_getLogs", [query])
        return logs

    # -- transactions ------------------------------------------------------------------

    def send_transaction(
        self,
        account: LocalAccount,
        *,
        to: str | None,
        data: bytes = b"",
        value: int = 0,
        gas: int | None = None,
        receipt_timeout: float = 30.0,
    ) -> Receipt:
        """Sign locally, send, and wait for the receipt (anvil mines it immediately).

        Gas is estimated first, so a call that would revert raises RpcError carrying the
        revert string instead of wasting a mined transaction.
        """
        tx: dict[str, Any] = {
            "from": account.address,
            "data": "0x" + data.hex(),
            "value": hex(value),
        }
        if to is not None:
            tx["to"] = to_checksum_address(to)
        with self._send_lock:
            if gas is None:
                gas = int(self.call("eth_estimateGas", [tx]), 16)
            priority_fee = self._priority_fee()
            base_fee = int(
                self.call("eth_getBlockByNumber", ["latest", False])["baseFeePerGas"], 16
            )
            nonce = self.call("eth_getTransactionCount", [account.address, "pending"])
            unsigned: dict[str, Any] = {
                "type": 2,
                "chainId": self.chain_id(),
                "nonce": int(nonce, 16),
                "value": value,
                "data": data,
                "gas": gas,
                "maxPriorityFeePerGas": priority_fee,
                "maxFeePerGas": 2 * base_fee + priority_fee,
            }
            if to is not None:
                unsigned["to"] = tx["to"]
            signed = account.sign_transaction(unsigned)
            raw = "0x" + bytes(signed.raw_transaction).hex()
            tx_hash = self.call("eth_sendRawTransaction", [raw])
        receipt = self.wait_for_receipt(tx_hash, timeout=receipt_timeout)
        if receipt.status != 1:
            raise TransactionFailedError(tx_hash, "reverted")
        return receipt

    def wait_for_receipt(
        self, tx_hash: str, *, timeout: float = 30.0, poll_interval: float = 0.02
    ) -> Receipt:
        deadline = time.monotonic() + timeout
        while True:
            raw = self.call("eth_getTransactionReceipt", [tx_hash])
            if raw is not None:
                return Receipt(
                    tx_hash=raw["transactionHash"],
                    block_number=int(raw["blockNumber"], 16),
                    status=int(raw["status"], 16),
                    gas_used=int(raw["gasUsed"], 16),
                    contract_address=(
                        to_checksum_address(raw["contractAddress"])
                        if raw.get("contractAddress")
                        else None
                    ),
                    logs=raw["logs"],
                )
            if time.monotonic() > deadline:
                raise TransactionFailedError(tx_hash, f"no receipt after {timeout}s")
            time.sleep(poll_interval)

    def _priority_fee(self) -> int:
        try:
            return int(self.call("eth_maxPriorityFeePerGas"), 16)
        except RpcError:
            return _DEFAULT_PRIORITY_FEE

    # -- anvil cheat codes -------------------------------------------------------------

    def set_balance(self, address: str, wei: int) -> None:
        """Set (not add to) the ETH balance of `address`."""
        self.call("anvil_setBalance", [address, hex(wei)])

    def increase_time(self, seconds: int) -> None:
        """Shift the chain clock forward; takes effect in the next mined block."""
        self.call("evm_increaseTime", [seconds])

    def set_next_block_timestamp(self, timestamp: int) -> None:
        """Pin the next block's timestamp exactly (boundary tests of validAfter/validBefore)."""
        self.call("evm_setNextBlockTimestamp", [timestamp])

    def mine(self) -> None:
        self.call("evm_mine")
