"""The networks table of SPEC 2.1 and the resolved network a server runs on.

The EIP-712 domain (token name and version, chain id, verifying contract) is
always taken from here, never from a client's payload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KNOWN_NETWORKS", "NetworkInfo", "canonical_network_name"]


@dataclass(frozen=True, slots=True)
class NetworkInfo:
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


KNOWN_NETWORKS: dict[str, NetworkInfo] = {
    "base": NetworkInfo(
        name="base",
        caip2="eip155:8453",
        chain_id=8453,
        asset="0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        asset_name="USD Coin",
        asset_version="2",
        decimals=6,
        rpc_url="https://mainnet.base.org",
        explorer_tx_url="https://basescan.org/tx/{tx}",
        default_facilitator_url=None,
    ),
    "base-sepolia": NetworkInfo(
        name="base-sepolia",
        caip2="eip155:84532",
        chain_id=84532,
        asset="0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        asset_name="USDC",
        asset_version="2",
        decimals=6,
        rpc_url="https://sepolia.base.org",
        explorer_tx_url="https://sepolia.basescan.org/tx/{tx}",
        default_facilitator_url="https://x402.org/facilitator",
    ),
}

_ALIASES = {"mainnet": "base", "testnet": "base-sepolia"}


def canonical_network_name(name: str) -> str:
    """``mainnet``/``testnet`` are aliases; everything else is returned as given."""
    return _ALIASES.get(name, name)
