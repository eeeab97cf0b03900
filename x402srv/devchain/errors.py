"""Errors raised by the local-chain tooling.

Tests, the demo and benchmarks catch these to tell "the tooling is not installed" apart
from "the chain refused what we sent":

    DevchainError
     ├── AnvilNotFoundError   the anvil binary is missing (npm packages not installed)
     ├── AnvilStartError      anvil exited or never answered on its port
     ├── RpcError             the node answered with a JSON-RPC error (e.g. a revert)
     └── TransactionFailedError  a mined transaction has status 0, or no receipt in time
"""

from __future__ import annotations

from typing import Any

from eth_abi.abi import decode

# Selector of Solidity's `Error(string)`, the encoding of `require(cond, "reason")`.
_ERROR_STRING_SELECTOR = bytes.fromhex("08c379a0")


class DevchainError(Exception):
    """Base class for every devchain failure."""


class AnvilNotFoundError(DevchainError):
    """The anvil binary could not be located."""


class AnvilStartError(DevchainError):
    """anvil did not come up (bad flags, port taken, crashed)."""


class RpcError(DevchainError):
    """A JSON-RPC error object returned by the node.

    The node's message is kept verbatim because revert strings ("FiatTokenV2: ...") are what
    tests assert on; `revert_reason` decodes the ABI-encoded reason when the node sends one.
    """

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{method}: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message
        self.data = data

    @property
    def revert_reason(self) -> str | None:
        """The `require`/`revert` string of a reverted call, if the node returned one."""
        if not isinstance(self.data, str) or not self.data.startswith("0x"):
            return None
        raw = bytes.fromhex(self.data[2:])
        if raw[:4] != _ERROR_STRING_SELECTOR:
            return None
        (reason,) = decode(["string"], raw[4:])
        return str(reason)


class TransactionFailedError(DevchainError):
    """A transaction reverted on-chain or was not mined before the timeout."""

    def __init__(self, tx_hash: str, message: str) -> None:
        super().__init__(f"transaction {tx_hash}: {message}")
        self.tx_hash = tx_hash
