"""What a plugin factory receives when the TOML selects it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .chain import ChainReader
from .config import Config
from .errors import ConfigError
from .interfaces import Clock, Store, system_clock
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
    #: Set by the registry: builds another registered store (see ``build_store``).
    store_builder: Callable[[str, str, Mapping[str, Any]], Store] | None = field(
        default=None, repr=False
    )

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
            lines = [f"{self.key_path}.{path}: {message}" for path, message in problems(exc)]
            raise ConfigError("invalid plugin options:\n  " + "\n  ".join(lines)) from None
