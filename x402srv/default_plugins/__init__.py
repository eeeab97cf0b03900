"""Built-in plugins, registered exactly like third-party ones (datasette's DEFAULT_PLUGINS)."""

DEFAULT_PLUGINS: tuple[str, ...] = (
    "x402srv.default_plugins.memory_store",
    "x402srv.default_plugins.sqlite.store",
    "x402srv.default_plugins.jwt_issuer",
    "x402srv.default_plugins.callback_issuer",
    "x402srv.default_plugins.facilitator",
)
