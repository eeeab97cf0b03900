"""The web3 connection of the gas wallet, and how to read its failures.

RPC URLs often carry an API key in the path or query, and web3's provider logs
its endpoint on every request at DEBUG. The provider here logs through
``x402srv_gaswallet.rpc``, whose filter replaces every URL this plugin opened
with its redacted form, so turning on DEBUG never prints a key.

Failures are sorted by what they say about a *send*: a refused connection
means the bytes never left; a timeout, a dropped connection or an HTTP error
after the request went out means they may have.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from web3 import AsyncHTTPProvider, AsyncWeb3
from web3.exceptions import Web3RPCError
from web3.providers.rpc.utils import REQUEST_RETRY_ALLOWLIST, ExceptionRetryConfiguration

from x402srv.plugin import redact_url

__all__ = ["GasWalletWeb3", "connect", "disconnect", "never_left", "node_message"]

GasWalletWeb3 = AsyncWeb3[AsyncHTTPProvider]


class _RedactUrls(logging.Filter):
    """Rewrites records that mention an RPC URL this plugin opened."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = message
        for url in self.urls:
            redacted = redacted.replace(url, redact_url(url))
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_LOG = logging.getLogger("x402srv_gaswallet.rpc")
_REDACTOR = _RedactUrls()
_LOG.addFilter(_REDACTOR)
# web3's provider says "Successfully disconnected from ..." at INFO on every close (each
# check, each start-up preflight): nothing a seller acts on. Its warnings still show.
_LOG.setLevel(logging.WARNING)


class ConnectionClosed(aiohttp.ClientConnectionError):
    """A request made after ``disconnect``: refused before any byte of it left."""


#: Reads are retried twice, briefly. A send is not: web3 would repeat it behind our
#: back, turning "the reply was lost" into a confusing "nonce too low".
_RETRIED = [method for method in REQUEST_RETRY_ALLOWLIST if method != "eth_sendRawTransaction"]


class _QuietHTTPProvider(AsyncHTTPProvider):
    """web3's provider, logging through a redacting logger and showing no URL in ``str``."""

    logger = _LOG

    def __init__(self, url: str, *, timeout: float) -> None:
        super().__init__(
            url,
            request_kwargs={"timeout": aiohttp.ClientTimeout(total=timeout)},
            exception_retry_configuration=ExceptionRetryConfiguration(
                errors=(aiohttp.ClientError, TimeoutError),
                retries=2,
                backoff_factor=0.05,
                method_allowlist=_RETRIED,
            ),
        )
        self._request_session_manager.logger = _LOG
        #: The session ``connect`` opened, closed by ``disconnect``: every request's.
        self.own_session: aiohttp.ClientSession | None = None
        # web3 opens and caches a session of its own for a request that finds the cached
        # one closed (a request still under way at ``disconnect``) or made on another
        # event loop, and nothing ever closes those: each warns when it is collected, in
        # whatever runs then. Every request takes ``own_session``, and none opens one.
        manager: Any = self._request_session_manager
        manager.async_cache_and_return_session = self._own_session
        self._redacted = redact_url(url)
        _REDACTOR.urls.add(url)

    async def _own_session(self, *_args: Any, **_kwargs: Any) -> aiohttp.ClientSession:
        """The session of every request: ``own_session``, refused once it is closed."""
        own = self.own_session
        if own is None or own.closed:
            raise ConnectionClosed("the RPC connection is closed")
        return own

    def __str__(self) -> str:
        return f"RPC connection {self._redacted}"


async def connect(url: str, *, request_timeout: float) -> GasWalletWeb3:
    """An AsyncWeb3 with its own session; close it with ``disconnect``.

    Every request opens a fresh connection (as web3's own default session does):
    a pooled connection the server already closed would fail a send in a way
    that looks ambiguous, while a refused connect proves nothing left.
    No default middleware: the settler formats its own transactions, and each
    middleware would add hidden RPC calls inside the nonce gate.
    """
    provider = _QuietHTTPProvider(url, timeout=request_timeout)
    session = aiohttp.ClientSession(
        raise_for_status=True, connector=aiohttp.TCPConnector(force_close=True)
    )
    provider.own_session = session
    return AsyncWeb3(provider, middleware=[])


async def disconnect(w3: GasWalletWeb3) -> None:
    """Close the session ``connect`` opened; requests still under way fail, none opens another.

    (An aiohttp session left open warns when it is collected.)
    """
    provider = w3.provider
    try:
        await provider.disconnect()  # (web3's cache: empty, as every request takes ours)
    finally:
        own = getattr(provider, "own_session", None)
        if own is not None and not own.closed:
            await own.close()


def node_message(exc: Web3RPCError) -> str:
    """The node's own error message (``nonce too low`` ...), without web3's decoration."""
    response: Any = exc.rpc_response or {}
    error = response.get("error") if isinstance(response, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return str(exc.message)


def never_left(exc: BaseException) -> bool:
    """True when the request certainly did not reach the node (no connection was made).

    A request made once the connection was closed never left either: a send refused
    that way is nothing sent, not a send cut off on its way.
    """
    return isinstance(exc, aiohttp.ClientConnectorError | ConnectionClosed)
