"""Read-only chain access for deciding what happened to a payment.

A few JSON-RPC reads over one shared ``httpx.AsyncClient``: receipts,
transactions (who sent one, whether it is mined), logs, ``authorizationState``
(at a block, the latest, or the node's pending block), the latest block. The
core uses it to confirm a facilitator's word, to resolve SETTLING records
(docs/protocol/states.md) and to see a settlement in flight before a failover moves on; settler
plugins get the same reader so "what does the chain say" has one implementation.

RPC failures raise ``ChainUnavailable`` whose message never contains the RPC
URL (it may carry an API key).

The receipts of mined transactions it read last are kept (``RECENT_RECEIPTS``):
a settler confirms its transaction from the chain and the pipeline then checks
the same receipt against the record itself (docs/protocol/flow.md, step 9). Asked
with ``read_within``, ``receipt`` answers what this reader read from the node that
recently instead of a second round trip; only the node's answers are kept, so a
settler cannot put a receipt there.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx
from eth_utils.crypto import keccak

__all__ = [
    "AUTHORIZATION_CANCELED_TOPIC",
    "AUTHORIZATION_USED_TOPIC",
    "TRANSFER_TOPIC",
    "ChainReader",
    "ChainUnavailable",
    "Log",
    "Receipt",
    "Transaction",
]

TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
AUTHORIZATION_USED_TOPIC = "0x" + keccak(text="AuthorizationUsed(address,bytes32)").hex()
AUTHORIZATION_CANCELED_TOPIC = "0x" + keccak(text="AuthorizationCanceled(address,bytes32)").hex()
_AUTHORIZATION_STATE_SELECTOR = keccak(text="authorizationState(address,bytes32)")[:4].hex()
#: How many receipts of mined transactions a reader keeps for ``receipt(read_within=...)``.
RECENT_RECEIPTS = 256


class ChainUnavailable(Exception):
    """The RPC endpoint could not answer (network, HTTP or JSON-RPC error)."""


def _error_message(error: object) -> str:
    message = error.get("message") if isinstance(error, dict) else error
    return str(message)


def address_topic(address: str) -> str:
    return "0x" + "0" * 24 + address[2:].lower()


def topic_address(topic: str) -> str:
    return "0x" + topic[-40:].lower()


@dataclass(frozen=True, slots=True)
class Log:
    address: str
    topics: tuple[str, ...]
    data: str
    tx_hash: str
    block_number: int

    @classmethod
    def from_rpc(cls, raw: dict[str, Any]) -> Log:
        return cls(
            address=str(raw["address"]).lower(),
            topics=tuple(str(t).lower() for t in raw.get("topics", ())),
            data=str(raw.get("data", "0x")),
            tx_hash=str(raw.get("transactionHash", "")).lower(),
            block_number=int(raw.get("blockNumber") or "0x0", 16),
        )

    def is_transfer(self, asset: str, payer: str, pay_to: str, value: int) -> bool:
        return (
            self.address == asset.lower()
            and len(self.topics) == 3
            and self.topics[0] == TRANSFER_TOPIC
            and topic_address(self.topics[1]) == payer.lower()
            and topic_address(self.topics[2]) == pay_to.lower()
            and int(self.data, 16) == value
        )

    def is_authorization_used(self, asset: str, payer: str, nonce: str) -> bool:
        return (
            self.address == asset.lower()
            and len(self.topics) == 3
            and self.topics[0] == AUTHORIZATION_USED_TOPIC
            and topic_address(self.topics[1]) == payer.lower()
            and self.topics[2] == nonce.lower()
        )


@dataclass(frozen=True, slots=True)
class Receipt:
    tx_hash: str
    status: int
    block_number: int
    logs: tuple[Log, ...]

    def has_transfer(self, asset: str, payer: str, pay_to: str, value: int) -> bool:
        """The receipt succeeded and moved exactly ``value`` from payer to pay_to."""
        return self.status == 1 and any(
            log.is_transfer(asset, payer, pay_to, value) for log in self.logs
        )

    def settles(self, asset: str, payer: str, pay_to: str, value: int, nonce: str) -> bool:
        """This transaction used THIS authorization, and it paid ``pay_to``.

        Matched per authorization (docs/protocol/states.md): the token's ``AuthorizationUsed``
        for ``(payer, nonce)`` and a ``Transfer`` of exactly ``value`` from the
        payer to ``pay_to``, in one successful transaction. A transaction that
        settles several authorizations (a batching facilitator, a multicall)
        pays each of their challenges; a transaction that merely holds a
        matching Transfer from another authorization pays none of ours.
        """
        return (
            self.status == 1
            and any(log.is_authorization_used(asset, payer, nonce) for log in self.logs)
            and self.has_transfer(asset, payer, pay_to, value)
        )


@dataclass(frozen=True, slots=True)
class Transaction:
    """What ``eth_getTransactionByHash`` says: who sent it, and its block (None while pending)."""

    tx_hash: str
    sender: str
    block_number: int | None


class ChainReader:
    """Async JSON-RPC reads. Open it once per process; share it."""

    def __init__(
        self,
        rpc_url: str,
        *,
        timeout: float = 10.0,
        log_lookback_blocks: int = 10_000,
        log_chunk_blocks: int = 2_000,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._url = rpc_url
        self._timeout = timeout
        self._client = client
        self._owns_client = client is None
        self._closed = False  # (``close`` ran, and no ``open`` since)
        self._ids = itertools.count(1)
        self.log_lookback_blocks = log_lookback_blocks
        self.log_chunk_blocks = log_chunk_blocks
        #: txHash -> (loop time read, receipt): the last mined receipts the node answered.
        self._receipts: OrderedDict[str, tuple[float, Receipt]] = OrderedDict()

    async def open(self) -> None:
        self._closed = False
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
            self._owns_client = True

    async def close(self) -> None:
        """Close the reader's own client; reads after this fail until ``open``.

        (A read still under way at shutdown once opened a new client here that
        nothing closed.)
        """
        self._closed = True
        if self._client is not None and self._owns_client:
            await self._client.aclose()
        self._client = None

    async def call(self, method: str, params: list[Any]) -> Any:
        answer = await self._request(method, params)
        if answer.get("error"):
            raise ChainUnavailable(f"{method}: {_error_message(answer['error'])}")
        return answer.get("result")

    async def simulate(self, to: str, data: str) -> str | None:
        """``eth_call`` at the latest block: None if it succeeds, else the revert message.

        Raises ``ChainUnavailable`` when the node cannot answer, or answers with an
        error that is not a revert.
        """
        answer = await self._request("eth_call", [{"to": to, "data": data}, "latest"])
        error = answer.get("error")
        if not error:
            return None
        message = _error_message(error)
        code = error.get("code") if isinstance(error, dict) else None
        # EIP-1474 gives reverts code 3; nodes that predate it say so in the message.
        if code == 3 or "revert" in message.lower():
            return message
        raise ChainUnavailable(f"eth_call: {message}")

    async def _request(self, method: str, params: list[Any]) -> dict[str, Any]:
        if self._client is None:
            if self._closed:
                raise ChainUnavailable(f"{method}: the chain reader is closed")
            await self.open()  # (a reader never opened opens at its first read)
        assert self._client is not None
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        try:
            response = await self._client.post(self._url, json=body)
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ChainUnavailable(f"{method}: RPC request failed ({type(exc).__name__})") from None
        if not isinstance(answer, dict):
            raise ChainUnavailable(f"{method}: malformed RPC answer")
        return answer

    async def chain_id(self) -> int:
        return int(await self.call("eth_chainId", []), 16)

    async def latest_block(self) -> tuple[int, int]:
        """(number, timestamp) of the latest block: the pin for reads that decide together."""
        block = await self.call("eth_getBlockByNumber", ["latest", False])
        return int(block["number"], 16), int(block["timestamp"], 16)

    async def block_timestamp(self, number: int) -> int:
        """The timestamp of block ``number``."""
        block = await self.call("eth_getBlockByNumber", [hex(number), False])
        if not isinstance(block, dict):
            raise ChainUnavailable(f"eth_getBlockByNumber: no block {number}")
        return int(block["timestamp"], 16)

    async def last_block_before(self, timestamp: int, *, latest: tuple[int, int]) -> int:
        """The newest block up to ``latest`` (number, timestamp) stamped before ``timestamp``.

        -1 when there is none. Steps back from ``latest`` in doubling strides,
        then halves the last stride: about two reads per doubling of the distance
        (some 30 for a day of two-second blocks), none when ``latest`` is before.
        """
        number, stamp = latest
        if stamp < timestamp:
            return number
        high, stride = number, 1  # block ``high`` is stamped at or after ``timestamp``
        while True:
            low = max(0, number - stride)
            if await self.block_timestamp(low) < timestamp:
                break
            if low == 0:
                return -1
            high, stride = low, stride * 2
        while high - low > 1:  # ``low`` is stamped before ``timestamp``, ``high`` not
            middle = (low + high) // 2
            if await self.block_timestamp(middle) < timestamp:
                low = middle
            else:
                high = middle
        return low

    async def receipt(self, tx_hash: str, *, read_within: float = 0.0) -> Receipt | None:
        """The transaction's receipt; None while it is not mined (or unknown).

        ``read_within`` > 0 accepts a receipt this reader read from the node at
        most that many seconds ago (the settler's confirmation, a moment before).
        """
        loop_time = asyncio.get_running_loop().time()
        key = tx_hash.lower()
        if read_within > 0 and (kept := self._receipts.get(key)) is not None:
            read_at, kept_receipt = kept
            if loop_time - read_at <= read_within:
                return kept_receipt
        raw = await self.call("eth_getTransactionReceipt", [tx_hash])
        if not raw:
            return None
        receipt = Receipt(
            tx_hash=str(raw["transactionHash"]).lower(),
            status=int(raw.get("status") or "0x0", 16),
            block_number=int(raw["blockNumber"], 16),
            logs=tuple(Log.from_rpc(log) for log in raw.get("logs", ())),
        )
        if receipt.tx_hash == key:  # kept only under the hash it was asked for
            self._receipts[key] = (loop_time, receipt)
            self._receipts.move_to_end(key)
            if len(self._receipts) > RECENT_RECEIPTS:
                self._receipts.popitem(last=False)
        return receipt

    async def transaction(self, tx_hash: str) -> Transaction | None:
        """The transaction as the node knows it (mined or pending); None if it does not."""
        raw = await self.call("eth_getTransactionByHash", [tx_hash])
        if not raw:
            return None
        sender = raw.get("from")
        if not isinstance(sender, str):
            raise ChainUnavailable("eth_getTransactionByHash: malformed RPC answer")
        block = raw.get("blockNumber")
        return Transaction(
            tx_hash=str(raw.get("hash") or tx_hash).lower(),
            sender=sender.lower(),
            block_number=int(block, 16) if isinstance(block, str) else None,
        )

    async def authorization_state(
        self, asset: str, payer: str, nonce: str, *, block: int | str | None = None
    ) -> bool:
        """``authorizationState(payer, nonce)`` at ``block`` (default: latest).

        ``block="pending"`` reads the node's pending block: the transactions
        waiting in its pool are applied, so an authorization being settled
        right now shows as used before it is mined. A node that does not have
        ``block`` yet (a load-balanced RPC lagging behind another) answers
        with an error: ``ChainUnavailable``, never a stale "unused".
        """
        data = (
            "0x"
            + _AUTHORIZATION_STATE_SELECTOR
            + address_topic(payer)[2:]
            + nonce[2:].lower().rjust(64, "0")
        )
        tag = "latest" if block is None else block if isinstance(block, str) else hex(block)
        result = await self.call("eth_call", [{"to": asset, "data": data}, tag])
        if not isinstance(result, str) or not result.startswith("0x"):
            raise ChainUnavailable("eth_call: malformed RPC answer")
        return int(result, 16) != 0 if len(result) > 2 else False

    async def logs(
        self, address: str, topics: list[Any], from_block: int, to_block: int
    ) -> list[Log]:
        found: list[Log] = []
        start = from_block
        while start <= to_block:
            end = min(to_block, start + self.log_chunk_blocks - 1)
            raw = await self.call(
                "eth_getLogs",
                [
                    {
                        "address": address,
                        "topics": topics,
                        "fromBlock": hex(start),
                        "toBlock": hex(end),
                    }
                ],
            )
            found.extend(Log.from_rpc(log) for log in raw or ())
            start = end + 1
        return found

    async def authorization_events(
        self,
        asset: str,
        payer: str,
        nonce: str,
        *,
        to_block: int | None = None,
        lookback: int | None = None,
    ) -> list[Log]:
        """AuthorizationUsed / AuthorizationCanceled logs of (payer, nonce), newest window only.

        The window is ``lookback`` blocks (default ``log_lookback_blocks``) up to ``to_block``.
        """
        if to_block is None:
            to_block, _ = await self.latest_block()
        topics = [
            [AUTHORIZATION_USED_TOPIC, AUTHORIZATION_CANCELED_TOPIC],
            address_topic(payer),
            nonce.lower(),
        ]
        window = self.log_lookback_blocks if lookback is None else lookback
        start = max(0, to_block - window)
        return await self.logs(asset, topics, start, to_block)
