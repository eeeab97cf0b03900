"""Serving: the listening sockets, the worker processes, and how they start and stop.

``serve`` is ``x402srv --config FILE``; ``sockets`` binds the listeners (a port
that cannot be bound names its key), ``worker`` is one serving process (the app,
its second listener, a graceful stop), ``supervisor`` runs several of them.
"""

from __future__ import annotations

from .serve import serve

__all__ = ["serve"]
