"""Entry point ``gas-wallet``: registers the settler and checks its config at build time.

Everything that can be wrong in the TOML fails here, before the server starts,
with the key path: the missing key or RPC, a key that is not a key, a receipt
wait that would outlive the SETTLING lease.
"""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.plugin import ConfigError, PluginContext, Register, Secret, Settler, hookimpl

from .options import LEASE_MARGIN_SECONDS, GasWalletOptions
from .settler import GasWalletSettler

__all__ = ["build_gas_wallet", "register_settlers"]

KEY_PATH = "settlement.gas_wallet_private_key"


def build_gas_wallet(ctx: PluginContext) -> GasWalletSettler:
    """The factory the TOML selects with ``strategy = "gas-wallet"`` (or just a key)."""
    options = ctx.parse_options(GasWalletOptions)
    settlement = ctx.config.settlement
    if settlement.gas_wallet_private_key is None:
        raise ConfigError(
            'required by the gas-wallet strategy (a string, { env = "NAME" } or { file = "path" })',
            path=KEY_PATH,
        )
    account = _account(settlement.gas_wallet_private_key)
    network = ctx.config.network_info
    if not network.rpc_url:
        raise ConfigError(
            f"required by the gas-wallet strategy: network {network.name} has no default RPC",
            path="settlement.rpc_url",
        )
    budget = settlement.lease_seconds - 2 * options.nonce_lease_seconds - LEASE_MARGIN_SECONDS
    if options.receipt_timeout_seconds >= budget:
        raise ConfigError(
            f"must be less than {budget:g} s: settlement.lease_seconds "
            f"({settlement.lease_seconds}) minus twice nonce_lease_seconds "
            f"({options.nonce_lease_seconds:g}) minus {LEASE_MARGIN_SECONDS:g} s, so the "
            "settlement ends before its SETTLING lease does",
            path=f"{ctx.key_path}.receipt_timeout_seconds",
        )
    return GasWalletSettler(
        account=account,
        rpc_url=network.rpc_url,
        network=network,
        options=options,
        store=ctx.store,
        chain=ctx.chain,
        clock=ctx.clock,
    )


def _account(secret: Secret) -> LocalAccount:
    try:
        account: LocalAccount = Account.from_key(secret.reveal())
    except Exception:
        # The library's message may quote the input; say only what is wrong.
        raise ConfigError(
            "not a usable private key (expected 32 bytes as 64 hex digits, 0x optional)",
            path=KEY_PATH,
        ) from None
    return account


@hookimpl
def register_settlers(register: Register[Settler]) -> None:
    register("gas-wallet", build_gas_wallet)
