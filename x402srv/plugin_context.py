"""What a plugin factory receives when the TOML selects it.

A settler is built once per network it settles on (and per place in that
network's list): ``network`` and ``settler`` say which; ``settlement`` holds
its own keys (``facilitator_url``, ``facilitator_auth``, ``gas_wallet_private_key``),
read from its ``[[networks.settlers]]`` table or, in the one-network form, from
``[settlement]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .chain import ChainReader
from .config import Config, SettlerConfig, SettlerSpec
from .errors import ConfigError
from .interfaces import Clock, Store, system_clock
from .networks import NetworkInfo
from .validation_errors import problems

__all__ = ["PluginContext"]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class PluginContext:
    """The whole config, the plugin's own option table, and what was built before it.

    Stores are built first, then the settler (which may use the store's leases and
    the chain reader), then the credential issuer.
    """

    config: Config
    name: str
    key_path: str
    options: Mapping[str, Any] = field(default_factory=dict)
    clock: Clock = system_clock
    store: Store | None = None
    chain: ChainReader | None = None
    #: The network a settler settles on (its first token; the token of a payment is
    #: ``SettlementRequest.network``). Default: the config's first network.
    network: NetworkInfo | None = None
    #: A settler's place in its network's list (None: built outside of one).
    settler: SettlerSpec | None = None

    @property
    def on_network(self) -> NetworkInfo:
        """The network this plugin serves (the first one when it serves them all)."""
        return self.network or self.config.network_info

    @property
    def settlement(self) -> SettlerConfig:
        """A settler's own keys: its ``[[networks.settlers]]`` table, else ``[settlement]``."""
        if self.settler is not None:
            return self.settler.config
        return self.config.settlement.as_settler()

    @property
    def settlement_path(self) -> str:
        """The key path of those keys, for error messages (``networks[0].settlers[1]``)."""
        return self.settler.path if self.settler is not None else "settlement"

    @property
    def sole_settler(self) -> bool:
        """Whether nothing else settles on this network (no failover behind it)."""
        return self.settler is None or self.settler.count == 1

    def parse_options(self, model: type[M]) -> M:
        """Validate the plugin's option table; errors name ``<key_path>.<key>``.

        Secret references in it (``{ env = "NAME" }``) read the environment the
        config was read with (``Config.env``).
        """
        try:
            return model.model_validate(
                dict(self.options),
                context={"base_dir": self.config.base_dir, "env": self.config.env},
            )
        except ValidationError as exc:
            lines = [f"{self.key_path}.{path}: {message}" for path, message in problems(exc)]
            raise ConfigError("invalid plugin options:\n  " + "\n  ".join(lines)) from None
