"""``--host/--port/--workers``: command-line values that replace ``[server]`` keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from x402srv.config.models import Config, ServerConfig
from x402srv.config.problems import problems
from x402srv.errors import ConfigError

__all__ = ["with_overrides"]


def with_overrides(config: Config, overrides: Mapping[str, Any]) -> Config:
    """``config`` with the given ``[server]`` keys replaced, validated like the file's."""
    updates = {key: value for key, value in overrides.items() if value is not None}
    if not updates:
        return config
    try:
        server = ServerConfig.model_validate({**config.server.model_dump(), **updates})
    except ValidationError as exc:
        path, message = problems(exc, config=True)[0]
        raise ConfigError(f"--{path}: {message}") from None
    return config.model_copy(update={"server": server})
