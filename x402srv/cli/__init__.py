"""The ``x402srv`` command and what its operator subcommands do."""
