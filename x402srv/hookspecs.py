"""THE plugin contract of x402srv.

Plugins are found through the entry-point group ``x402srv`` (and the built-ins
in ``x402srv.default_plugins`` are registered the same way). Each hook runs
once at start-up and *registers* named factories; pluggy never awaits, so the
objects a factory returns carry the async methods (``x402srv.interfaces``).

The TOML then chooses by name (``[store] backend``, ``[settlement] strategy``,
``[credentials] issuer``); hook order never decides anything. A factory gets a
``PluginContext`` with the whole config, its own option table (``[store.<name>]``
...) to validate with its own pydantic model, the clock, and for settlers and
issuers the store and chain reader already built.

A minimal plugin (everything it needs comes from ``x402srv.plugin``)::

    from x402srv.plugin import Register, Store, hookimpl

    @hookimpl
    def register_stores(register: Register[Store]) -> None:
        register("mystore", lambda ctx: MyStore(ctx.parse_options(MyOptions)))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import pluggy

if TYPE_CHECKING:
    from x402srv.interfaces import CredentialIssuer, Settler, Store
    from x402srv.server.plugin_context import PluginContext

__all__ = ["Factory", "Register", "hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("x402srv")
hookimpl = pluggy.HookimplMarker("x402srv")

T = TypeVar("T")

#: ``factory(ctx) -> plugin object``; called only if the TOML selects its name.
Factory = Callable[["PluginContext"], T]


#: ``register(name, factory)``: offer a factory under a name the TOML can select.
Register = Callable[[str, Factory[T]], None]


@hookspec
def register_stores(register: Register[Store]) -> None:
    """Register store factories (``Store`` protocol), selected by ``[store] backend``."""


@hookspec
def register_settlers(register: Register[Settler]) -> None:
    """Register settlement strategies (``Settler``), selected by ``[settlement] strategy``."""


@hookspec
def register_credential_issuers(register: Register[CredentialIssuer]) -> None:
    """Register credential issuers (``CredentialIssuer``), selected by ``[credentials] issuer``."""
