"""Gateway mode: x402srv as a paying reverse proxy in front of the seller's existing API.

``[[routes]]`` in the TOML (``x402srv.config.routes``) name path prefixes, the upstream
each one forwards to, and the plans whose tokens open it. ``create_app`` calls
``install.install_gateway``; the handler's decision (forward, 401, 402, paid
retry) is ``decide``'s, the HTTP plumbing ``forward``'s, and path safety
``x402srv.server.paths``'.

This package ``__init__`` imports nothing, so that importing one of its modules
does not pull in the Sanic handler with it.
"""
