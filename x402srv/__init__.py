"""x402srv: a payment-gated access server.

Buyer agents find the seller's plans through an A2A agent card, pay with an
x402 v2 ``exact`` payment (an EIP-3009 authorization) and receive an
``AccessGrant`` whose bearer token the seller's API accepts through
``x402srv.guard``. Stores, settlers and credential issuers are pluggy plugins
(``x402srv.hookspecs``); the access flow is the fixed ``x402srv.pipeline``.
"""

from .hookspecs import hookimpl
from .interfaces import (
    Authorization,
    CredentialIssuer,
    GrantRequest,
    IssuedCredential,
    Rejected,
    Settled,
    SettlementHooks,
    SettlementOutcome,
    SettlementRequest,
    Settler,
    Store,
    Unknown,
)
from .plugin_context import PluginContext

__version__ = "0.1.0"

__all__ = [
    "Authorization",
    "CredentialIssuer",
    "GrantRequest",
    "IssuedCredential",
    "PluginContext",
    "Rejected",
    "Settled",
    "SettlementHooks",
    "SettlementOutcome",
    "SettlementRequest",
    "Settler",
    "Store",
    "Unknown",
    "__version__",
    "hookimpl",
]
