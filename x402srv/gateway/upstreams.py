"""The gateway's connections to its upstreams: kept open and reused, whatever the buyers do.

The gateway and the MCP gateway send every call through one httpx client whose
transport is ``UpstreamTransport``. httpx's own pool (httpcore 1.0) did three
things the stream bench showed at 50 calls at once (docs/performance.md):

- it closed each connection coming back whenever more than its keep-alive limit
  (20) were open in all, busy ones included: a new TCP connection per call;
- each request and each close walked every connection and polled the idle ones'
  sockets: most of a millisecond per call;
- a call cancelled between its new connection's connect and its first byte (a
  buyer who left then) left that connection in the pool for good, neither idle
  nor closed nor expired: a few ``wrk`` runs took all 100 places, and then every
  call waited for the pool until its timeout (504 ``UPSTREAM_TIMEOUT``).

Here each origin has a stack of idle connections, the latest on top. A call
takes the top one, checked once (not expired, its socket not closed by the
upstream), or opens one. At most ``max_connections`` are out at once; a call
waits for a free place at most its pool timeout (``connect_timeout_seconds``),
then fails with ``httpx.PoolTimeout``. A connection goes back only when its
answer was read to the end and closed cleanly (httpcore's connection then says
it is idle). Any other end (an error, a cancellation wherever it lands, an
answer not read to its end) closes it, in a task of its own, and its place is
free at once. The stack's bottom connections are closed once idle longer than
``keepalive_expiry``, and at most ``max_connections`` stay idle per origin.

HTTP/1.1 only, like the gateway's client before it; no proxies (the client
never read them from the environment).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import httpcore
import httpx

__all__ = ["UpstreamTransport", "upstream_client"]

#: httpcore's exceptions and what httpx raises for each (the names httpx's own
#: transport maps them to; anything else of httpcore's is a TransportError).
_HTTPX_ERRORS: Final[dict[type[Exception], type[httpx.TransportError]]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
}
_CORE_ERRORS: Final = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
)

_Key = tuple[bytes, bytes, int]  # (scheme, host, port): httpcore's Origin is not hashable


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    try:
        yield
    except _CORE_ERRORS as exc:
        for kind in type(exc).__mro__:
            if kind in _HTTPX_ERRORS:
                raise _HTTPX_ERRORS[kind](str(exc)) from exc
        raise httpx.TransportError(str(exc)) from exc


def upstream_client() -> httpx.AsyncClient:
    """The one client through which the gateway (or the MCP gateway) calls its upstreams.

    Every buyer's call goes through it, so it keeps nothing of one call for the
    next: no headers of its own, no redirects followed, nothing read from the
    environment, and no cookies. httpx's client keeps each ``Set-Cookie`` it reads
    and sends it back with its later requests to that host: the session an
    upstream opened for one buyer went with every other buyer's calls. An
    upstream's cookies pass back to the buyer as any header does, and a buyer's
    own ``Cookie`` header goes on as sent (docs/gateway.md).
    """
    keeps_none = http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    client = httpx.AsyncClient(
        transport=UpstreamTransport(),
        trust_env=False,
        follow_redirects=False,
        cookies=keeps_none,
    )
    client.headers.clear()
    return client


class UpstreamTransport(httpx.AsyncBaseTransport):
    """httpx's transport for the gateway's client (see the module docstring)."""

    def __init__(
        self,
        *,
        max_connections: int = 100,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context  # (built at the first https upstream: ``_tls``)
        # asyncio's, through anyio: httpcore's default finds it (and imports it) at the
        # first connection, on the first call's path (about a tenth of a second here).
        self._network = httpcore.AnyIOBackend()
        self._places = asyncio.Semaphore(max_connections)
        self._out = 0  # connections out with a call
        self._idle: dict[_Key, deque[tuple[float, httpcore.AsyncHTTPConnection]]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False
        self.opened = 0  # connections opened so far (the tests and the bench read it)

    @property
    def idle(self) -> int:
        """Connections waiting for a call now, across origins."""
        return sum(len(stack) for stack in self._idle.values())

    @property
    def busy(self) -> int:
        """Connections out with a call now."""
        return self._out

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._closed:
            raise RuntimeError("the gateway's upstream transport is closed")
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        url = request.url
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=stream,
            extensions=request.extensions,
        )
        origin = core.url.origin
        key = (origin.scheme, origin.host, origin.port)
        await self._take_place(request.extensions.get("timeout", {}).get("pool"))
        self._out += 1
        connection: httpcore.AsyncHTTPConnection | None = None
        try:
            connection = self._connection_for(key, origin)
            with _httpx_errors():
                answer = await connection.handle_async_request(core)
        except BaseException:
            self._give_back(key, connection, reusable=False)
            raise
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Answer(self, key, connection, answer.stream),
            extensions=answer.extensions,
        )

    async def _take_place(self, wait: float | None) -> None:
        if not self._places.locked():
            await self._places.acquire()  # (a free place: no wait, no timer)
            return
        try:
            async with asyncio.timeout(wait):
                await self._places.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"no upstream connection free within {wait} s ({self.max_connections} out at once)"
            ) from None

    def _connection_for(self, key: _Key, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        """The latest idle connection to ``origin`` still fit for a call, else a new one."""
        stack = self._idle.get(key)
        while stack:
            _, connection = stack.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection
            self._close(connection)
        self.opened += 1
        return httpcore.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._tls() if origin.scheme == b"https" else None,
            network_backend=self._network,
            keepalive_expiry=self.keepalive_expiry,
        )

    def _tls(self) -> ssl.SSLContext:
        """certifi's roots, verified; like the client, nothing read from the environment."""
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return self._ssl_context

    def _give_back(
        self, key: _Key, connection: httpcore.AsyncHTTPConnection | None, *, reusable: bool
    ) -> None:
        """The call is over with ``connection``: idle again if it can be, else closed."""
        self._out -= 1
        self._places.release()
        if connection is None:
            return
        if not reusable or self._closed or not connection.is_idle() or connection.is_closed():
            self._close(connection)
            return
        stack = self._idle.get(key)
        if stack is None:
            stack = self._idle[key] = deque()
        now = time.monotonic()
        stack.append((now, connection))
        if len(stack) > self.max_connections:
            self._close(stack.popleft()[1])
        # Each stack's bottom is its longest idle: closed past its keep-alive, whichever
        # upstream it goes to (one that gets no more calls keeps no sockets open).
        expired = now - self.keepalive_expiry
        for idle in self._idle.values():
            while idle and idle[0][0] < expired:
                self._close(idle.popleft()[1])

    def _close(self, connection: httpcore.AsyncHTTPConnection) -> None:
        """Close ``connection`` in a task of its own: no cancellation of a caller stops it."""
        closing = asyncio.ensure_future(connection.aclose())
        self._closing.add(closing)
        closing.add_done_callback(self._closed_one)

    def _closed_one(self, closing: asyncio.Task[None]) -> None:
        self._closing.discard(closing)
        if not closing.cancelled():
            closing.exception()  # (a socket that fails to close is closed enough)

    async def aclose(self) -> None:
        self._closed = True
        for stack in self._idle.values():
            for _, connection in stack:
                self._close(connection)
        self._idle.clear()
        if self._closing:
            await asyncio.wait(list(self._closing))


class _Answer(httpx.AsyncByteStream):
    """An upstream answer's body; closing it gives its connection back (or closes it)."""

    def __init__(
        self,
        transport: UpstreamTransport,
        key: _Key,
        connection: httpcore.AsyncHTTPConnection,
        stream: Any,
    ) -> None:
        self._transport = transport
        self._key = key
        self._connection = connection
        self._stream = stream
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            with _httpx_errors():
                await self._stream.aclose()
        finally:
            # Idle only if httpcore saw the answer to its end and closed it cleanly: a
            # close cut short (a cancellation) leaves it busy, and it is closed instead.
            self._transport._give_back(self._key, self._connection, reusable=True)
