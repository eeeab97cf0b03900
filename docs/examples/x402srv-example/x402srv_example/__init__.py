"""x402srv-example: the plugin guide's three examples, as a package the tests install.

- ``audit`` (``audit_store``): wraps another store and appends one JSON line per
  state change to an audit file.
- ``relayer`` (``relayer_settler``): a relaying account pays the gas, through the
  signer that holds its key.
- ``key-service`` (``key_service_issuer``): the seller's own key service mints the
  credential.

Each module imports from ``x402srv.plugin`` only, the module plugin authors use;
the docs include these files as they are, and ``tests/`` runs them.
"""

from .audit_store import AuditOptions, AuditStore
from .key_service_issuer import KeyServiceIssuer, KeyServiceOptions
from .relayer_settler import RelayerOptions, RelayerSettler

__all__ = [
    "AuditOptions",
    "AuditStore",
    "KeyServiceIssuer",
    "KeyServiceOptions",
    "RelayerOptions",
    "RelayerSettler",
]
