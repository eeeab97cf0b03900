"""What a plugin factory receives when the TOML selects it.

A settler is built once per network it settles on (and per place in that
network's list): ``network`` and ``settler`` say which; ``settlement`` holds
its own keys (``facilitator_url``, ``facilitator_auth``, ``gas_wallet_private_key``),
read from its ``[[networks.settlers]]`` table or, in the one-network form, from
``[settlement]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from x402srv.config.models import Config, SettlerConfig, SettlerSpec
from x402srv.config.problems import problems
from x402srv.errors import ConfigError
from x402srv.interfaces import Clock, Store, system_clock
from x402srv.settlement.chain import ChainReader
from x402srv.wire.networks import NetworkInfo

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
    #: Set by the registry: builds another registered store (see ``build_store``).
    store_builder: Callable[[str, str, Mapping[str, Any]], Store] | None = field(
        default=None, repr=False
    )

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

    def build_store(
        self, name: str, options: Mapping[str, Any] | None = None, *, key_path: str | None = None
    ) -> Store:
        """Build the registered store ``name`` with ``options``, for a store that wraps another.

        The wrapped store is checked against the ``Store`` protocol like any other and
        is neither opened nor closed here: the wrapper's ``start``/``stop`` hand on to it.
        Errors in its options are named under ``key_path`` (default
        ``<this key_path>.<name>``). A store cannot wrap itself.
        """
        if self.store_builder is None:
            raise ConfigError("this context cannot build stores", path=self.key_path)
        if name == self.name:
            raise ConfigError(f"store {name!r} cannot wrap itself", path=self.key_path)
        return self.store_builder(name, key_path or f"{self.key_path}.{name}", options or {})

    def _line(self, path: str, message: str) -> str:
        if path:
            return f"{self.key_path}.{path}: {message}"
        # A model validator names its key with a leading "." (or speaks of the table).
        return self.key_path + message if message.startswith(".") else f"{self.key_path}: {message}"

    def parse_options(self, model: type[M]) -> M:
        """Validate the plugin's option table; errors name ``<key_path>.<key>``.

        Fields typed ``SecretValue`` take the core's ``"..."`` / ``{ env = "NAME" }`` /
        ``{ file = "path" }`` forms, read against the config's directory and environment.
        """
        try:
            return model.model_validate(
                dict(self.options),
                context={"base_dir": self.config.base_dir, "env": self.config.env},
            )
        except ValidationError as exc:
            found = problems(exc, config=True, model=model)
            lines = [self._line(path, message) for path, message in found]
            if len(lines) == 1:  # one line on the terminal, as for the core's tables
                raise ConfigError(f"invalid plugin options: {lines[0]}") from None
            raise ConfigError("invalid plugin options:\n  " + "\n  ".join(lines)) from None
