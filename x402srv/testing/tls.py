"""One SSL context for the default httpx clients of a test process (the tests and their servers).

Only for tests: a server in production builds its few clients once.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import httpx
from httpx._transports import default as httpx_transports

__all__ = ["share_the_default_ssl_context"]


def share_the_default_ssl_context() -> None:
    """httpx clients that verify as httpx does by default share one SSL context.

    httpx builds a context for every client it makes, and so for every
    ``httpx.get``/``httpx.post``; loading certifi's CA bundle into it takes
    ~17 ms of CPU, and the suite makes thousands, in the process that the
    servers under test share a core with. Each server the tests start builds
    several too (its facilitator, chain and gateway clients): the warm
    interpreter they are forked from (``x402srv.testing.zygote``) shares them.
    The shared context is the one httpx would build (the same call, made once
    per environment); a client that asks for anything else (its own context, no
    verification, a certificate) gets a context of its own.
    """
    build = httpx.create_ssl_context  # (what httpx's transports call, through their own import)
    shared: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        # (what httpx reads to build it: SSL_CERT_FILE or SSL_CERT_DIR, if it trusts the env)
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in shared:
            shared[key] = build(verify=True, trust_env=trust_env)
        return shared[key]

    httpx_transports.create_ssl_context = create_ssl_context  # type: ignore[attr-defined]
