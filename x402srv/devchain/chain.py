"""`Devchain`: a running anvil node with the EIP3009Token deployed, ready for payments.

Tests, the demo and benchmarks all need the same thing - a chain, a USDC-like token and
funded buyers - so this facade owns that set-up and its teardown in one place.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from eth_account import Account
from eth_account.signers.local import LocalAccount

import x402srv.devchain.token as token_ops
from x402srv.devchain.anvil import AnvilProcess, find_anvil
from x402srv.devchain.rpc import RpcClient
from x402srv.devchain.token import TokenInfo, TransferLog

DEV_PRIVATE_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"
"""anvil's first default dev account (public knowledge; worthless outside a local chain)."""

WEI_PER_ETH = 10**18


class Devchain:
    """A started local chain: `rpc_url`, `chain_id`, `network`, `token`, funded accounts.

    Build it with `Devchain.start()`; use it as a context manager or call `stop()`.
    """

    def __init__(
        self, anvil: AnvilProcess, rpc: RpcClient, deployer: LocalAccount, token: TokenInfo
    ) -> None:
        self.anvil = anvil
        self.rpc = rpc
        self.deployer = deployer
        self.token = token

    @classmethod
    def start(
        cls,
        chain_id: int = 31337,
        project_dir: Path | None = None,
        *,
        anvil_binary: Path | None = None,
        domain_name: str = "USD Coin",
        domain_version: str = "2",
        decimals: int = 6,
    ) -> Devchain:
        """Start anvil and deploy the token from anvil's first dev account.

        `project_dir` is where node_modules is searched (default: the cwd and its parents);
        `anvil_binary` skips the search, e.g. with the result of `ensure_anvil`.
        `domain_name`/`domain_version` are the token's EIP-712 domain (USDC's by default).
        """
        binary = anvil_binary if anvil_binary is not None else find_anvil(project_dir)
        anvil = AnvilProcess(binary, chain_id=chain_id).start()
        rpc = RpcClient(anvil.url)
        try:
            deployer = Account.from_key(DEV_PRIVATE_KEY)
            token = token_ops.deploy_token(
                rpc, deployer, name=domain_name, version=domain_version, decimals=decimals
            )
        except BaseException:
            rpc.close()
            anvil.stop()
            raise
        return cls(anvil, rpc, deployer, token)

    @property
    def rpc_url(self) -> str:
        return self.anvil.url

    @property
    def chain_id(self) -> int:
        return self.token.chain_id

    @property
    def network(self) -> str:
        """CAIP-2 id ("eip155:31337"), the `network` of x402 payment requirements."""
        return self.token.network

    def new_account(self, eth: int = 10, usdc_atomic: int = 100_000_000) -> LocalAccount:
        """A fresh random account holding `eth` ETH and `usdc_atomic` token units.

        Random keys keep tests independent on the shared session chain: no test sees
        another's balances or nonces.
        """
        account: LocalAccount = Account.create()
        if eth:
            self.fund_eth(account.address, eth * WEI_PER_ETH)
        if usdc_atomic:
            self.mint(account.address, usdc_atomic)
        return account

    def fund_eth(self, address: str, wei: int) -> None:
        """Set the ETH balance of `address` to `wei` (anvil_setBalance; not additive)."""
        self.rpc.set_balance(address, wei)

    def mint(self, address: str, amount: int) -> None:
        """Mint `amount` atomic token units to `address`."""
        token_ops.mint(self.rpc, self.token, self.deployer, address, amount)

    def balance_of(self, address: str) -> int:
        """Token balance of `address` in atomic units."""
        return token_ops.balance_of(self.rpc, self.token, address)

    def authorization_state(self, authorizer: str, nonce: bytes | str) -> bool:
        return token_ops.authorization_state(self.rpc, self.token, authorizer, nonce)

    def transfer_logs(
        self, to: str | None = None, from_block: int = 0, *, from_address: str | None = None
    ) -> list[TransferLog]:
        return token_ops.transfer_logs(
            self.rpc, self.token, to=to, from_address=from_address, from_block=from_block
        )

    def block_timestamp(self) -> int:
        """Timestamp of the latest block: the clock the token checks validity against."""
        return self.rpc.block_timestamp()

    def increase_time(self, seconds: int) -> int:
        """Move chain time forward and mine a block; return the new block timestamp.

        The shift is permanent for the session chain, and the x402 facilitator compares
        validBefore with the wall clock, so keep shifts small next to payment timeouts.
        """
        self.rpc.increase_time(seconds)
        self.rpc.mine()
        return self.rpc.block_timestamp()

    def mine_ahead(self, blocks: int, seconds_apart: int = 0) -> None:
        """Mine ``blocks`` blocks at once, each ``seconds_apart`` after the one before.

        Moved ahead this way, chain time stays ahead of the wall clock for good, as
        with ``increase_time``: on a session chain, keep it small next to payment
        timeouts, or give the test an anvil of its own.
        """
        params = [hex(blocks), hex(seconds_apart)] if seconds_apart else [hex(blocks)]
        self.rpc.call("anvil_mine", params)

    def stop(self) -> None:
        """Close the RPC client and stop anvil by PID; safe to call twice."""
        self.rpc.close()
        self.anvil.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
