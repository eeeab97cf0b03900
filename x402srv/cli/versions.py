"""What is installed: the core's version and each plugin distribution's, for ``--version``.

Read from the packaging metadata (``importlib.metadata``) without importing a
plugin, so a plugin that fails to load cannot hide itself or the others here.
A distribution that declares the keyword ``x402srv-example`` is an example
from the docs (docs/plugins.md: the plugin guide's package): it is listed, and
marked, so a seller never mistakes it for a plugin to run in production.
"""

from __future__ import annotations

import importlib.metadata
import platform
from dataclasses import dataclass

import x402srv

__all__ = ["EXAMPLE_KEYWORD", "Distribution", "plugin_distributions", "version_text"]

EXAMPLE_KEYWORD = "x402srv-example"
EXAMPLE_NOTE = "an example from the docs, not for production"


@dataclass(frozen=True, slots=True)
class Distribution:
    name: str
    version: str
    plugins: tuple[str, ...]  # its ``x402srv`` entry points
    example: bool


def _is_example(dist: importlib.metadata.Distribution) -> bool:
    keywords = " ".join(dist.metadata.get_all("Keywords") or ())
    return EXAMPLE_KEYWORD in keywords.replace(",", " ").split()


def plugin_distributions() -> list[Distribution]:
    """Every distribution with an ``x402srv`` entry point, by name."""
    found: dict[str, tuple[importlib.metadata.Distribution, list[str]]] = {}
    for entry_point in importlib.metadata.entry_points(group="x402srv"):
        dist = entry_point.dist
        if dist is None:
            continue
        found.setdefault(dist.name, (dist, []))[1].append(entry_point.name)
    return [
        Distribution(name, dist.version, tuple(sorted(names)), _is_example(dist))
        for name, (dist, names) in sorted(found.items())
    ]


def version_text() -> str:
    """``x402srv 0.1.0 (Python 3.11.7)`` and one line per plugin distribution."""
    lines = [f"x402srv {x402srv.__version__} (Python {platform.python_version()})"]
    plugins = plugin_distributions()
    lines.append("plugins:" if plugins else "plugins: none installed (x402srv plugins)")
    for dist in plugins:
        note = f"  ({EXAMPLE_NOTE})" if dist.example else ""
        lines.append(f"  {dist.name} {dist.version}: {', '.join(dist.plugins)}{note}")
    return "\n".join(lines)
