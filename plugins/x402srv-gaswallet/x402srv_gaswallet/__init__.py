"""x402srv-gaswallet: settle x402 payments on-chain from the seller's own gas wallet.

Installed, it registers the settlement strategy ``gas-wallet`` through the
``x402srv`` entry-point group; a config selects it with
``[settlement] strategy = "gas-wallet"`` or simply by giving
``gas_wallet_private_key``.
"""

from .options import GasWalletOptions
from .plugin import build_gas_wallet
from .settler import GasWalletSettler

__all__ = ["GasWalletOptions", "GasWalletSettler", "build_gas_wallet"]
