"""Logging set-up for the ``x402srv`` command.

HTTP and RPC client libraries log request URLs (httpx at INFO, web3 at DEBUG);
facilitator and RPC URLs may carry credentials or API keys, so those loggers
are held at WARNING whatever the root level is (``sanic.root`` too: it only
prints the extensions banner at INFO).
"""

from __future__ import annotations

import logging

__all__ = ["configure_logging"]

QUIET_LOGGERS = ("httpx", "httpcore", "web3", "urllib3", "websockets", "sanic.root")


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
