"""The known networks (docs/networks.md), and what one payment option is: a chain and one token.

``NetworkInfo`` is one way to pay: an EVM chain (CAIP-2 id, chain id, RPC,
explorer) and one EIP-3009 USD stablecoin on it (address, EIP-712 name and
version, decimals). A seller's network may accept several tokens; each is its
own ``NetworkInfo`` (``x402srv.config.networks.Network.options``). The EIP-712
domain (token name and version, chain id, verifying contract) is always taken
from here, never from a client's payload.

Where the built-in defaults come from, per column:

- USDC addresses: Circle's "USDC contract addresses" page
  (https://developers.circle.com/stablecoins/usdc-contract-addresses), mainnets
  and testnets; the same addresses are in the official x402 SDK's table
  (``x402.mechanisms.evm.default_assets.DEFAULT_ASSETS``, x402 2.25.0) wherever
  it lists the chain.
- EIP-712 name and version: the official x402 SDK's table where it lists the
  chain (``DEFAULT_ASSETS``: Base, Base Sepolia, Ethereum, Polygon, Arbitrum
  One, Arbitrum Sepolia, Avalanche); for Avalanche Fuji and Polygon Amoy the
  SDK's earlier network table (coinbase/x402
  ``typescript/packages/legacy/x402/src/types/shared/evm/config.ts``); for
  Sepolia, OP Mainnet and OP Sepolia the token contract's own ``name()`` and
  ``version()`` (FiatTokenV2_2 signs with exactly those), which the SDK tables
  do not list. Every one is compared with the token's on-chain
  ``DOMAIN_SEPARATOR`` at start-up (``x402srv.settlement.domains``), so a wrong entry is
  reported, not silently signed against.
- RPC URLs: the chains' own public endpoints where the chain publishes one
  (none for Ethereum, Sepolia and Polygon: give ``rpc_url``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KNOWN_NETWORKS", "NetworkInfo", "Token", "canonical_network_name"]


@dataclass(frozen=True, slots=True)
class Token:
    """An EIP-3009 token: its address, EIP-712 domain name and version, and decimals."""

    asset: str
    name: str
    version: str
    decimals: int


@dataclass(frozen=True, slots=True)
class NetworkInfo:
    """One payment option: a chain and one token on it."""

    name: str
    caip2: str
    chain_id: int
    asset: str
    asset_name: str
    asset_version: str
    decimals: int
    rpc_url: str | None = field(repr=False)  # may carry an API key
    explorer_tx_url: str | None
    default_facilitator_url: str | None

    def explorer_url(self, tx_hash: str) -> str | None:
        if not self.explorer_tx_url:
            return None
        return self.explorer_tx_url.replace("{tx}", tx_hash)

    @property
    def token(self) -> Token:
        return Token(self.asset, self.asset_name, self.asset_version, self.decimals)


def _usdc(
    name: str,
    chain_id: int,
    asset: str,
    eip712_name: str,
    *,
    rpc_url: str | None,
    explorer: str,
    facilitator: str | None = None,
) -> NetworkInfo:
    return NetworkInfo(
        name=name,
        caip2=f"eip155:{chain_id}",
        chain_id=chain_id,
        asset=asset,
        asset_name=eip712_name,
        asset_version="2",  # every Circle USDC below is FiatToken v2.x: version "2"
        decimals=6,
        rpc_url=rpc_url,
        explorer_tx_url=f"{explorer}/tx/{{tx}}",
        default_facilitator_url=facilitator,
    )


# Sources per network: see the module docstring ("SDK" = x402 DEFAULT_ASSETS, "legacy
# SDK" = the earlier TypeScript table, "contract" = the token's name()/version()).
KNOWN_NETWORKS: dict[str, NetworkInfo] = {
    # Base: address Circle + SDK; "USD Coin"/"2" SDK.
    "base": _usdc(
        "base",
        8453,
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "USD Coin",
        rpc_url="https://mainnet.base.org",
        explorer="https://basescan.org",
    ),
    # Base Sepolia: address Circle + SDK; "USDC"/"2" SDK.
    "base-sepolia": _usdc(
        "base-sepolia",
        84532,
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "USDC",
        rpc_url="https://sepolia.base.org",
        explorer="https://sepolia.basescan.org",
        facilitator="https://x402.org/facilitator",
    ),
    # Ethereum: address Circle + SDK; "USD Coin"/"2" SDK.
    "ethereum": _usdc(
        "ethereum",
        1,
        "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
        "USD Coin",
        rpc_url=None,
        explorer="https://etherscan.io",
    ),
    # Sepolia: address Circle; "USDC"/"2" contract.
    "sepolia": _usdc(
        "sepolia",
        11155111,
        "0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238",
        "USDC",
        rpc_url=None,
        explorer="https://sepolia.etherscan.io",
    ),
    # Polygon PoS (native USDC, not the bridged USDC.e): address Circle + SDK; "USD Coin"/"2" SDK.
    "polygon": _usdc(
        "polygon",
        137,
        "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
        "USD Coin",
        rpc_url=None,
        explorer="https://polygonscan.com",
    ),
    # Polygon Amoy: address Circle; "USDC"/"2" legacy SDK.
    "polygon-amoy": _usdc(
        "polygon-amoy",
        80002,
        "0x41E94Eb019C0762f9Bfcf9Fb1E58725BfB0e7582",
        "USDC",
        rpc_url="https://rpc-amoy.polygon.technology",
        explorer="https://amoy.polygonscan.com",
    ),
    # Arbitrum One: address Circle + SDK; "USD Coin"/"2" SDK.
    "arbitrum": _usdc(
        "arbitrum",
        42161,
        "0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
        "USD Coin",
        rpc_url="https://arb1.arbitrum.io/rpc",
        explorer="https://arbiscan.io",
    ),
    # Arbitrum Sepolia: address Circle + SDK; "USD Coin"/"2" SDK.
    "arbitrum-sepolia": _usdc(
        "arbitrum-sepolia",
        421614,
        "0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d",
        "USD Coin",
        rpc_url="https://sepolia-rollup.arbitrum.io/rpc",
        explorer="https://sepolia.arbiscan.io",
    ),
    # OP Mainnet (native USDC, not USDC.e): address Circle; "USD Coin"/"2" contract.
    "optimism": _usdc(
        "optimism",
        10,
        "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85",
        "USD Coin",
        rpc_url="https://mainnet.optimism.io",
        explorer="https://optimistic.etherscan.io",
    ),
    # OP Sepolia: address Circle; "USDC"/"2" contract.
    "optimism-sepolia": _usdc(
        "optimism-sepolia",
        11155420,
        "0x5fd84259d66Cd46123540766Be93DFE6D43130D7",
        "USDC",
        rpc_url="https://sepolia.optimism.io",
        explorer="https://sepolia-optimism.etherscan.io",
    ),
    # Avalanche C-Chain: address Circle + SDK; "USD Coin"/"2" SDK.
    "avalanche": _usdc(
        "avalanche",
        43114,
        "0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E",
        "USD Coin",
        rpc_url="https://api.avax.network/ext/bc/C/rpc",
        explorer="https://snowtrace.io",
    ),
    # Avalanche Fuji: address Circle; "USD Coin"/"2" legacy SDK.
    "avalanche-fuji": _usdc(
        "avalanche-fuji",
        43113,
        "0x5425890298aed601595a70AB815c96711a31Bc65",
        "USD Coin",
        rpc_url="https://api.avax-test.network/ext/bc/C/rpc",
        explorer="https://testnet.snowtrace.io",
    ),
}

_ALIASES = {"mainnet": "base", "testnet": "base-sepolia"}


def canonical_network_name(name: str) -> str:
    """``mainnet``/``testnet`` are aliases; everything else is returned as given."""
    return _ALIASES.get(name, name)
