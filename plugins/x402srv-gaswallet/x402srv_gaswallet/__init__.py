"""x402srv-gaswallet: settle x402 payments on-chain from the seller's own gas wallet.

Installed, it registers the settlement strategy ``gas-wallet`` through the
``x402srv`` entry-point group; a config selects it with
``[settlement] strategy = "gas-wallet"`` or simply by giving
``gas_wallet_private_key``.
"""

from typing import TYPE_CHECKING, Any

from .options import GasWalletOptions
from .plugin import build_gas_wallet

if TYPE_CHECKING:
    from .settler import GasWalletSettler

__all__ = ["GasWalletOptions", "GasWalletSettler", "build_gas_wallet"]


def __getattr__(name: str) -> Any:
    """``GasWalletSettler`` on first use: it imports web3, which a config without a gas
    wallet never needs (every x402srv process loads this package's entry point)."""
    if name == "GasWalletSettler":
        from .settler import GasWalletSettler

        return GasWalletSettler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
