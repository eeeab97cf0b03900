"""Where a seller gets paid: its networks, their tokens and their settlers, resolved.

A config says it one of two ways:

    # one network: [seller] network, a [network] table for eip155:<id>, [settlement]
    [seller]
    network = "base-sepolia"

    # any number of networks, one [[networks]] table each
    [[networks]]
    network = "base"                        # a known name (docs/networks.md) or eip155:<id>
    rpc_url = { env = "BASE_RPC_URL" }      # default: the known network's public RPC
    tokens = [                              # default: the known network's USDC;
      { asset = "0x...", name = "USD Coin", version = "2", decimals = 6 },  # needed for eip155:<id>
    ]
    [[networks.settlers]]                   # tried in this order (default: [settlement])
    facilitator_url = { env = "CDP_FACILITATOR_URL" }
    facilitator_auth = { env = "CDP_FACILITATOR_TOKEN" }
    [[networks.settlers]]
    strategy = "gas-wallet"                 # its key here, or [settlement] gas_wallet_private_key

Both forms resolve to the same ``Network`` objects: a chain, its tokens (each
token on it is one payment option, a ``NetworkInfo``) and its ordered settlers
(``SettlerSpec``). A ``CAIP-2`` id is a custom network even when a known
network has that chain id: its tokens are the ones given, nothing is assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from pydantic import Field, field_validator, model_validator

from x402srv.config.fields import StrictModel, checksum_address
from x402srv.config.secrets import HttpUrlSecret, SecretValue, shown_url
from x402srv.wire.networks import KNOWN_NETWORKS, NetworkInfo, Token, canonical_network_name

__all__ = [
    "Network",
    "NetworkConfig",
    "NetworkEntry",
    "SettlerConfig",
    "SettlerSpec",
    "TokenConfig",
    "network_name",
    "resolve_entries",
    "resolve_single",
]

_CAIP2 = re.compile(r"eip155:[1-9][0-9]{0,18}")
#: Settlers one network may list; more would outlive any settlement lease anyway.
MAX_SETTLERS = 8


def network_name(value: str) -> str:
    """A known network's name (aliases resolved) or ``eip155:<chain id>``; else ValueError."""
    name = canonical_network_name(value)
    if name in KNOWN_NETWORKS or _CAIP2.fullmatch(name):
        return name
    known = ", ".join([*KNOWN_NETWORKS, "mainnet", "testnet", "eip155:<chain id>"])
    raise ValueError(f"unknown network {value!r} (known: {known})")


class NetworkConfig(StrictModel):
    """``[network]``: the token and chain of a custom ``eip155:<id>`` network (one-network form)."""

    asset: str | None = None
    asset_name: str | None = None
    asset_version: str | None = None
    decimals: int = Field(default=6, ge=0, le=36)
    rpc_url: HttpUrlSecret | None = None
    explorer_tx_url: str | None = None

    @field_validator("asset")
    @classmethod
    def _asset(cls, value: str | None) -> str | None:
        return None if value is None else checksum_address(value)


class TokenConfig(StrictModel):
    """One EIP-3009 USD stablecoin of a ``[[networks]]`` entry."""

    asset: str
    name: str = Field(min_length=1, max_length=128)  # the EIP-712 domain's name
    version: str = Field(min_length=1, max_length=32)  # and version
    decimals: int = Field(ge=0, le=36)  # no default: 6 and 18 both exist

    @field_validator("asset")
    @classmethod
    def _asset(cls, value: str) -> str:
        return checksum_address(value)


class SettlerConfig(StrictModel):
    """One settler of a network: a facilitator (by URL), the gas wallet, or any settler plugin."""

    strategy: str | None = None
    facilitator_url: HttpUrlSecret | None = None
    facilitator_auth: SecretValue | None = None
    gas_wallet_private_key: SecretValue | None = None

    @property
    def selected_strategy(self) -> str:
        """A gas wallet key without a strategy selects ``gas-wallet`` (docs/protocol/config.md)."""
        if self.strategy:
            return self.strategy
        return "gas-wallet" if self.gas_wallet_private_key else "facilitator"

    @model_validator(mode="after")
    def _keys_of_its_strategy(self) -> SettlerConfig:
        strategy = self.selected_strategy
        if strategy != "facilitator":
            for key in ("facilitator_url", "facilitator_auth"):
                if getattr(self, key) is not None:
                    raise ValueError(f".{key}: only for the facilitator strategy (not {strategy})")
        elif self.gas_wallet_private_key is not None:
            raise ValueError(
                ".gas_wallet_private_key: ignored, because a facilitator never reads it "
                '(strategy = "gas-wallet" uses it)'
            )
        return self


class NetworkEntry(StrictModel):
    """``[[networks]]``: one chain, the tokens accepted on it and who settles there."""

    network: str
    rpc_url: HttpUrlSecret | None = None
    explorer_tx_url: str | None = None
    tokens: list[TokenConfig] | None = Field(default=None, min_length=1, max_length=16)
    settlers: list[SettlerConfig] = Field(default_factory=list, max_length=MAX_SETTLERS)

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        return network_name(value)


@dataclass(frozen=True, slots=True)
class SettlerSpec:
    """A settler in its network's list: what the TOML says, where, and how logs name it."""

    network: str  # CAIP-2
    position: int  # 1-based place in the network's list
    count: int  # how many settlers the network has
    path: str  # the key path of its table: "networks[0].settlers[1]", or "settlement"
    config: SettlerConfig
    label: str  # "facilitator https://x402.org/<redacted> #1 on eip155:84532": no secret

    @property
    def strategy(self) -> str:
        return self.config.selected_strategy

    @property
    def short_label(self) -> str:
        """``facilitator #1 on eip155:84532``: what public answers (``/readyz``) call it."""
        return f"{self.strategy} #{self.position} on {self.network}"


@dataclass(frozen=True)
class Network:
    """A chain the seller is paid on: its tokens (one option each) and its settlers, in order."""

    name: str
    caip2: str
    chain_id: int
    rpc_url: str | None = field(repr=False)  # may carry an API key
    explorer_tx_url: str | None
    default_facilitator_url: str | None
    tokens: tuple[Token, ...]
    settlers: tuple[SettlerSpec, ...]
    path: str  # "networks[0]", or "seller.network" for the one-network form

    @cached_property
    def options(self) -> tuple[NetworkInfo, ...]:
        return tuple(
            NetworkInfo(
                name=self.name,
                caip2=self.caip2,
                chain_id=self.chain_id,
                asset=token.asset,
                asset_name=token.name,
                asset_version=token.version,
                decimals=token.decimals,
                rpc_url=self.rpc_url,
                explorer_tx_url=self.explorer_tx_url,
                default_facilitator_url=self.default_facilitator_url,
            )
            for token in self.tokens
        )

    def option(self, asset: str) -> NetworkInfo | None:
        """The option paying with ``asset`` (any letter case) on this network."""
        wanted = asset.lower()
        return next((o for o in self.options if o.asset.lower() == wanted), None)


def _label(config: SettlerConfig, position: int, caip2: str, default_url: str | None) -> str:
    strategy = config.selected_strategy
    if strategy != "facilitator":
        return f"{strategy} #{position} on {caip2}"
    url = config.facilitator_url.reveal() if config.facilitator_url else default_url
    shown = shown_url(url.rstrip("/")) if url else "(no URL)"  # its path, never credentials
    return f"facilitator {shown} #{position} on {caip2}"


def _specs(
    caip2: str, settlers: list[tuple[str, SettlerConfig]], default_url: str | None
) -> tuple[SettlerSpec, ...]:
    count = len(settlers)
    return tuple(
        SettlerSpec(caip2, n, count, path, config, _label(config, n, caip2, default_url))
        for n, (path, config) in enumerate(settlers, start=1)
    )


def resolve_single(
    name: str, table: NetworkConfig | None, *, rpc_override: str | None, settler: SettlerConfig
) -> Network:
    """The one-network form: ``[seller] network`` (+ ``[network]``), settled by ``[settlement]``."""
    if name in KNOWN_NETWORKS:
        known = KNOWN_NETWORKS[name]
        if table is not None and (
            table.asset
            or table.asset_name
            or table.asset_version
            or "decimals" in table.model_fields_set
        ):
            raise ValueError(
                f"network: the token of {name} is fixed; [network] asset keys are only "
                "for custom eip155:<id> networks"
            )
        rpc = table.rpc_url.reveal() if table and table.rpc_url else known.rpc_url
        explorer = table.explorer_tx_url if table and table.explorer_tx_url else None
        return Network(
            name=known.name,
            caip2=known.caip2,
            chain_id=known.chain_id,
            rpc_url=rpc_override or rpc,
            explorer_tx_url=explorer or known.explorer_tx_url,
            default_facilitator_url=known.default_facilitator_url,
            tokens=(known.token,),
            settlers=_specs(known.caip2, [("settlement", settler)], known.default_facilitator_url),
            path="seller.network",
        )
    if table is None:
        raise ValueError(f"network: a custom network {name} needs a [network] table")
    missing = [k for k in ("asset", "asset_name", "asset_version") if not getattr(table, k)]
    if missing:
        raise ValueError(f"network: {', '.join(missing)} required for {name}")
    token = Token(str(table.asset), str(table.asset_name), str(table.asset_version), table.decimals)
    return Network(
        name=name,
        caip2=name,
        chain_id=int(name.split(":", 1)[1]),
        rpc_url=rpc_override or (table.rpc_url.reveal() if table.rpc_url else None),
        explorer_tx_url=table.explorer_tx_url,
        default_facilitator_url=None,
        tokens=(token,),
        settlers=_specs(name, [("settlement", settler)], None),
        path="seller.network",
    )


def _entry(index: int, entry: NetworkEntry, default_settler: SettlerConfig) -> Network:
    path = f"networks[{index}]"
    known = KNOWN_NETWORKS.get(entry.network)
    if entry.tokens is not None:
        tokens = tuple(Token(t.asset, t.name, t.version, t.decimals) for t in entry.tokens)
    elif known is not None:
        tokens = (known.token,)
    else:
        raise ValueError(f"{path}.tokens: required for a custom network {entry.network}")
    seen: set[str] = set()
    for n, token in enumerate(tokens):
        if token.asset.lower() in seen:
            raise ValueError(f"{path}.tokens[{n}].asset: {token.asset} is listed twice")
        seen.add(token.asset.lower())
    caip2 = known.caip2 if known else entry.network
    default_url = known.default_facilitator_url if known else None
    settlers = [(f"{path}.settlers[{n}]", s) for n, s in enumerate(entry.settlers)]
    rpc = entry.rpc_url.reveal() if entry.rpc_url else (known.rpc_url if known else None)
    return Network(
        name=entry.network,
        caip2=caip2,
        chain_id=int(caip2.split(":", 1)[1]),
        rpc_url=rpc,
        explorer_tx_url=entry.explorer_tx_url or (known.explorer_tx_url if known else None),
        default_facilitator_url=default_url,
        tokens=tokens,
        settlers=_specs(caip2, settlers or [("settlement", default_settler)], default_url),
        path=path,
    )


def resolve_entries(
    entries: list[NetworkEntry], *, default_settler: SettlerConfig
) -> tuple[Network, ...]:
    """The ``[[networks]]`` form; a network without settlers is settled by ``[settlement]``."""
    networks: list[Network] = []
    where: dict[str, str] = {}
    for index, entry in enumerate(entries):
        network = _entry(index, entry, default_settler)
        if network.caip2 in where:
            raise ValueError(
                f"{network.path}.network: {network.caip2} is already declared by "
                f"{where[network.caip2]}"
            )
        where[network.caip2] = network.path
        networks.append(network)
    return tuple(networks)
