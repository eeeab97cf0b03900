"""Who is who in the demo: anvil's well-known dev accounts, one role each.

The keys are public (anvil prints them at start, derived from the mnemonic
"test test ... junk") and worthless outside a local chain, which is why the demo
may write them to its temp directory. They are still never printed: the demo
shows by example what a seller does with real keys. One account per role keeps
nonces apart (the deployer's mint transactions never race the gas wallet's
settlements) and makes the balances easy to read.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.devchain import DEV_PRIVATE_KEY

__all__ = ["DemoAccounts", "demo_accounts"]

_GAS_WALLET_KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"  # #1
_BUYER_KEY = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"  # #2
_SELLER_ADDRESS = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"  # #3: only its address is needed


@dataclass(frozen=True)
class DemoAccounts:
    """deployer (#0) deploys and mints the token; gas_wallet (#1) pays settlement gas;
    buyer (#2) signs the payment; seller (#3) only receives (``payTo``)."""

    deployer: LocalAccount
    gas_wallet: LocalAccount
    buyer: LocalAccount
    seller: str


def demo_accounts() -> DemoAccounts:
    return DemoAccounts(
        deployer=Account.from_key(DEV_PRIVATE_KEY),
        gas_wallet=Account.from_key(_GAS_WALLET_KEY),
        buyer=Account.from_key(_BUYER_KEY),
        seller=_SELLER_ADDRESS,
    )
