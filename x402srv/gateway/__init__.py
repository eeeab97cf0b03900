"""Gateway mode: x402srv as a paying reverse proxy in front of the seller's existing API.

``[[routes]]`` in the TOML (``route_config``) name path prefixes, the upstream
each one forwards to, and the plans whose tokens open it. ``create_app`` calls
``install.install_gateway``; the handler's decision (forward, 401, 402, paid
retry) is ``decide``'s, the HTTP plumbing ``forward``'s, and path safety
``x402srv.server.paths``'.

This package ``__init__`` imports nothing: ``x402srv.config.models`` imports
``route_config`` from here, and anything that imported the config back would
close a cycle.
"""
