"""Entry point ``gas-wallet``: registers the settler and checks its config at build time.

Everything that can be wrong in the TOML fails here, before the server starts,
with the key path: the missing key or RPC, a key that is not a key, a receipt
wait that would outlive the SETTLING lease.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from x402srv.plugin import ConfigError, PluginContext, Register, Secret, Settler, hookimpl

from .options import LEASE_MARGIN_SECONDS, GasWalletOptions

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from .settler import GasWalletSettler

__all__ = ["build_gas_wallet", "register_settlers"]


def build_gas_wallet(ctx: PluginContext) -> GasWalletSettler:
    """The factory the TOML selects with ``strategy = "gas-wallet"`` (or just a key).

    Built once per network it settles on (the last resort of a network's
    ``[[networks.settlers]]``, or the one network's ``[settlement]``); its key is
    that settler's own ``gas_wallet_private_key``, else ``[settlement]``'s.
    """
    # (web3 and eth_account are imported here, when a config has a gas wallet: every
    # x402srv process loads every plugin, and they take ~0.5 s of CPU to import)
    from .settler import GasWalletSettler

    options = ctx.parse_options(GasWalletOptions)
    settlement = ctx.config.settlement
    secret = ctx.settlement.gas_wallet_private_key or settlement.gas_wallet_private_key
    key_path = f"{ctx.settlement_path}.gas_wallet_private_key"
    if secret is None:
        raise ConfigError(
            'required by the gas-wallet strategy (a string, { env = "NAME" } or { file = "path" })',
            path=key_path,
        )
    account = _account(secret, key_path)
    network = ctx.on_network
    if not network.rpc_url:
        raise ConfigError(
            f"required by the gas-wallet strategy: network {network.name} has no default RPC",
            path=_rpc_path(ctx),
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


def _rpc_path(ctx: PluginContext) -> str:
    """Where the network's RPC is configured: its ``[[networks]]`` table, or ``[settlement]``."""
    caip2 = ctx.on_network.caip2
    for network in ctx.config.resolved_networks:
        if network.caip2 == caip2 and network.path.startswith("networks["):
            return f"{network.path}.rpc_url"
    return "settlement.rpc_url"


def _account(secret: Secret, key_path: str) -> LocalAccount:
    from eth_account import Account

    try:
        account: LocalAccount = Account.from_key(secret.reveal())
    except Exception:
        # The library's message may quote the input; say only what is wrong.
        raise ConfigError(
            "not a usable private key (expected 32 bytes as 64 hex digits, 0x optional)",
            path=key_path,
        ) from None
    return account


@hookimpl
def register_settlers(register: Register[Settler]) -> None:
    register("gas-wallet", build_gas_wallet)
