"""x402srv: a payment-gated access server.

Buyer agents find the seller's plans through an A2A agent card, pay with an
x402 v2 ``exact`` payment (an EIP-3009 authorization) and receive an
``AccessGrant`` whose bearer token the seller's API accepts.

The public API is what this module exports (``__all__``), by who uses it:

- a seller serving x402srv from their own code: ``load_config``, ``Config``,
  ``create_app``, and ``agent_card`` to publish the card from their own app;
- a seller's API accepting x402srv's tokens: ``TokenVerifier`` and the typed
  ``AccessClaims`` it returns, ``verify_access_token`` (and ``_sync``) for any
  code with a key source (``HS256KeySource``, ``Ed25519KeySource``,
  ``JWKSKeySource``) and ``bearer_token`` to read the header,
  ``RevocationList`` for the grants the seller revoked, the Sanic guard
  (``require_access``, ``access_guard``, ``access_claims``) and the ASGI
  middleware (``AccessMiddleware``, ``asgi_access_claims``);
- a seller's API spending the calls a plan sold: ``Meter`` and the ``Usage``
  of each call;
- everyone: the error tree's bases (``X402SrvError``, ``ConfigError``,
  ``ProblemError``, ``InvalidToken``, ``KeySourceUnavailable``) and
  ``__version__``.

Plugin authors import ``x402srv.plugin`` (and test with ``x402srv.testing``).
Every other module is internal: it may change in any release. (``x402srv.guard``
and ``x402srv.asgi`` stay importable as modules too, for code that names them.)

Names are imported when first used (as pydantic's ``__init__`` does), so
``import x402srv`` (which every plugin does) pulls in neither Sanic nor web3.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from x402srv._version import __version__

#: public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    "Config": ("x402srv.config.models", "Config"),
    "load_config": ("x402srv.config.models", "load_config"),
    "create_app": ("x402srv.server.app", "create_app"),
    "agent_card": ("x402srv.wire.card", "agent_card"),
    "TokenVerifier": ("x402srv.tokens.verify", "TokenVerifier"),
    "AccessClaims": ("x402srv.tokens.claims", "AccessClaims"),
    "verify_access_token": ("x402srv.tokens.verify", "verify_access_token"),
    "verify_access_token_sync": ("x402srv.tokens.verify", "verify_access_token_sync"),
    "HS256KeySource": ("x402srv.tokens.verify", "HS256KeySource"),
    "Ed25519KeySource": ("x402srv.tokens.verify", "Ed25519KeySource"),
    "JWKSKeySource": ("x402srv.tokens.jwks", "JWKSKeySource"),
    "bearer_token": ("x402srv.tokens.admission", "bearer_token"),
    "RevocationList": ("x402srv.tokens.revocation", "RevocationList"),
    "require_access": ("x402srv.guard", "require_access"),
    "access_guard": ("x402srv.guard", "access_guard"),
    "access_claims": ("x402srv.guard", "access_claims"),
    "AccessMiddleware": ("x402srv.asgi", "AccessMiddleware"),
    "asgi_access_claims": ("x402srv.asgi", "access_claims"),
    "Meter": ("x402srv.usage.credits", "Meter"),
    "Usage": ("x402srv.usage.credits", "Usage"),
    "X402SrvError": ("x402srv.errors", "X402SrvError"),
    "ConfigError": ("x402srv.errors", "ConfigError"),
    "ProblemError": ("x402srv.errors", "ProblemError"),
    "InvalidToken": ("x402srv.errors", "InvalidToken"),
    "KeySourceUnavailable": ("x402srv.errors", "KeySourceUnavailable"),
    "hookimpl": ("x402srv.hookspecs", "hookimpl"),
}

__all__ = [  # (spelled out for the type checkers and linters; the same names as _LAZY)
    "AccessClaims",
    "AccessMiddleware",
    "Config",
    "ConfigError",
    "Ed25519KeySource",
    "HS256KeySource",
    "InvalidToken",
    "JWKSKeySource",
    "KeySourceUnavailable",
    "Meter",
    "ProblemError",
    "RevocationList",
    "TokenVerifier",
    "Usage",
    "X402SrvError",
    "__version__",
    "access_claims",
    "access_guard",
    "agent_card",
    "asgi_access_claims",
    "bearer_token",
    "create_app",
    "hookimpl",
    "load_config",
    "require_access",
    "verify_access_token",
    "verify_access_token_sync",
]

if TYPE_CHECKING:
    from x402srv.asgi import AccessMiddleware
    from x402srv.asgi import access_claims as asgi_access_claims
    from x402srv.config.models import Config, load_config
    from x402srv.errors import (
        ConfigError,
        InvalidToken,
        KeySourceUnavailable,
        ProblemError,
        X402SrvError,
    )
    from x402srv.guard import access_claims, access_guard, require_access
    from x402srv.hookspecs import hookimpl
    from x402srv.server.app import create_app
    from x402srv.tokens.admission import bearer_token
    from x402srv.tokens.claims import AccessClaims
    from x402srv.tokens.jwks import JWKSKeySource
    from x402srv.tokens.revocation import RevocationList
    from x402srv.tokens.verify import (
        Ed25519KeySource,
        HS256KeySource,
        TokenVerifier,
        verify_access_token,
        verify_access_token_sync,
    )
    from x402srv.usage.credits import Meter, Usage
    from x402srv.wire.card import agent_card


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'x402srv' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
