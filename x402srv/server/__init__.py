"""Serving: the app and what its routes use, the listening sockets, the worker processes.

``app`` builds the Sanic app (routes translate HTTP to the pipeline and back);
``serve`` is ``x402srv --config FILE``; ``sockets`` binds the listeners (a port
that cannot be bound names its key), ``worker`` is one serving process (the app,
its second listener, a graceful stop), ``supervisor`` runs several of them.
``registry`` builds the plugins the TOML names; ``health``, ``probes``, ``logs``,
``metrics``, ``paths``, ``problems`` and ``responses`` serve the routes.

Nothing is imported here: the pipeline imports ``x402srv.server.metrics``, and
must not pull in the serving machinery with it.
"""
