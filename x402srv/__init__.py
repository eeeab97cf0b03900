"""x402srv: a payment-gated access server.

Buyer agents find the seller's plans through an A2A agent card, pay with an
x402 v2 ``exact`` payment (an EIP-3009 authorization) and receive an
``AccessGrant`` whose bearer token the seller's API accepts.

The public surface, by who uses it:

- sellers' apps: ``x402srv.guard`` (Sanic), ``x402srv.asgi`` (FastAPI,
  Starlette), ``x402srv.tokens.verify_access_token`` (any code);
- plugin authors: ``x402srv.plugin`` (everything a store, settler or credential
  issuer needs) and ``x402srv.testing`` (the store contract suite, fixtures);
- everyone: the ``x402srv`` command.

Every other module is internal: it may change in any release.
"""

from .hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
