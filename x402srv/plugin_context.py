"""What a plugin factory receives when the TOML selects it."""

from __future__ import annotations

from collections.abc import Mapping
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

    def parse_options(self, model: type[M]) -> M:
        """Validate the plugin's option table; errors name ``<key_path>.<key>``."""
        try:
            return model.model_validate(
                dict(self.options),
                context={"base_dir": self.config.base_dir, "env": self.config.env},
            )
        except ValidationError as exc:
            lines = [f"{self.key_path}.{path}: {message}" for path, message in problems(exc)]
            raise ConfigError("invalid plugin options:\n  " + "\n  ".join(lines)) from None
