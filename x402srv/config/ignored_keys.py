"""Keys that would have no effect where they are written: each one is an error.

A key nobody reads is worse than a typo: the seller believes it is in force.
Unknown keys are refused by the models themselves (``extra="forbid"``); this
module refuses known keys whose context makes them idle, such as ``store.path``
with a Redis store, ``credentials.private_key`` with HS256, or an option table
for a plugin the config does not choose (docs/configuration.md, "Every key
takes effect"). Only keys the seller wrote count (``model_fields_set``): a
default is never an error.

The one exception is a table switched off with ``enabled = false``: its other
keys are kept for when it is switched on again.

``ConfigError`` names the key and says why it is ignored; ``Config`` calls
``check_ignored_keys`` once its networks and plans are resolved, with the sections
it judges (not itself: this module must not import the model that imports it).
"""

from __future__ import annotations

from x402srv.config.console import AdminConfig
from x402srv.config.networks import Network, NetworkConfig
from x402srv.config.plugin_tables import CredentialsConfig, SettlementConfig, StoreConfig

__all__ = ["check_ignored_keys"]

#: Stores of this project that never read ``[store] path`` or ``url``; a third-party
#: store may (one that wraps sqlite reads ``path``), so only these are judged.
_STORES_WITHOUT_PATH = ("memory", "redis", "postgres")
#: Stores of this project that never read ``[store] url``, and what they read instead.
_STORES_WITHOUT_URL = {
    "sqlite": "the sqlite store is a file (store.path)",
    "memory": "the memory store lives inside the process",
    "postgres": 'the postgres store takes its DSN from [store.postgres] dsn = { env = "..." }',
}
#: Keys only the jwt issuer reads, and those only the callback issuer reads.
_JWT_KEYS = ("secret", "algorithm", "private_key", "audience", "kid", "previous_keys")
_CALLBACK_KEYS = ("callback", "callback_timeout_seconds")


def check_ignored_keys(
    *,
    store: StoreConfig,
    settlement: SettlementConfig,
    credentials: CredentialsConfig,
    networks: tuple[Network, ...],
    network: NetworkConfig | None,
    admin: AdminConfig | None,
) -> None:
    """``ValueError`` ``"<key path>: ignored, because ..."`` for the first idle key found.

    ``networks`` are the resolved networks, ``network`` the one-network form's table.
    """
    _store(store)
    _settlement(settlement, networks)
    _credentials(credentials)
    if network is not None and settlement.rpc_url and "rpc_url" in network.model_fields_set:
        raise ValueError(
            "network.rpc_url: ignored, because settlement.rpc_url replaces it (keep one)"
        )
    audience_given = admin is not None and "jwt_audience" in admin.model_fields_set
    if admin and audience_given and admin.enabled and admin.jwt_secret is None:
        raise ValueError(
            "admin.jwt_audience: ignored without jwt_secret (the audience of admin JWTs)"
        )


def _store(store: StoreConfig) -> None:
    backend = store.backend
    if "path" in store.model_fields_set and backend in _STORES_WITHOUT_PATH:
        raise ValueError(
            f"store.path: ignored, because only the sqlite store reads it "
            f'(store.backend is "{backend}")'
        )
    if "url" in store.model_fields_set and backend in _STORES_WITHOUT_URL:
        raise ValueError(
            f"store.url: ignored, because {_STORES_WITHOUT_URL[backend]} "
            f'(store.backend is "{backend}")'
        )
    for table in store.plugin_tables():
        if table != backend:
            raise ValueError(
                f"store.{table}: ignored, because it configures the {table} store and "
                f'store.backend is "{backend}"'
            )


def _settlement(settlement: SettlementConfig, networks: tuple[Network, ...]) -> None:
    specs = [spec for network in networks for spec in network.settlers]
    given = settlement.model_fields_set
    as_default = [spec for spec in specs if spec.path == "settlement"]
    if not as_default:
        for key in ("strategy", "facilitator_url", "facilitator_auth"):
            if key in given:
                raise ValueError(
                    f"settlement.{key}: ignored, because every network lists its own settlers "
                    "([[networks.settlers]])"
                )
    elif settlement.selected_strategy != "facilitator":
        for key in ("facilitator_url", "facilitator_auth"):
            if key in given:
                raise ValueError(
                    f"settlement.{key}: ignored, because it is only for the facilitator "
                    f"strategy (settlement.strategy is {settlement.selected_strategy!r})"
                )
    if "gas_wallet_private_key" in given:
        # The gas wallet of a [[networks.settlers]] table without a key of its own reads it.
        readers = [
            spec
            for spec in specs
            if spec.strategy != "facilitator"
            and (spec.path == "settlement" or spec.config.gas_wallet_private_key is None)
        ]
        if not readers:
            raise ValueError(
                "settlement.gas_wallet_private_key: ignored, because no settler uses it "
                '(every settler is a facilitator, or has a key of its own; strategy = "gas-wallet")'
            )
    if "circuit_breaker" in given and not any(len(n.settlers) > 1 for n in networks):
        raise ValueError(
            "settlement.circuit_breaker: ignored, because no network has more than one "
            "settler (a breaker only skips a failing settler of a failover)"
        )
    strategies = {spec.strategy for spec in specs}
    for table in settlement.plugin_tables():
        if table not in strategies:
            used = ", ".join(sorted(strategies))
            raise ValueError(
                f"settlement.{table}: ignored, because no settler uses strategy {table!r} "
                f"(the settlers use: {used})"
            )


def _credentials(credentials: CredentialsConfig) -> None:
    issuer = credentials.issuer
    given = credentials.model_fields_set
    if issuer == "jwt":
        for key in _CALLBACK_KEYS:
            if key in given:
                raise ValueError(
                    f"credentials.{key}: ignored, because only the callback issuer reads it "
                    f'(credentials.issuer is "jwt")'
                )
        unused = {"HS256": "private_key", "EdDSA": "secret"}[credentials.algorithm]
        if unused in given:
            raise ValueError(
                f"credentials.{unused}: ignored, because algorithm is "
                f'"{credentials.algorithm}" (HS256 signs with secret, EdDSA with private_key)'
            )
    elif issuer == "callback":
        for key in _JWT_KEYS:
            if key in given:
                raise ValueError(
                    f"credentials.{key}: ignored, because only the jwt issuer reads it "
                    f'(credentials.issuer is "callback")'
                )
    for table in credentials.plugin_tables():
        if table != issuer:
            raise ValueError(
                f"credentials.{table}: ignored, because it configures the {table} issuer and "
                f'credentials.issuer is "{issuer}"'
            )
