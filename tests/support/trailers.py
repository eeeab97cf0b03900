"""HTTP/1.1 trailers on real sockets: an upstream that sends them and a client that reads them.

Neither uvicorn nor httpx speaks trailers (uvicorn ignores ASGI's trailer
extension, httpx drops what it reads), so both sides are h11 over asyncio:

- ``TrailerUpstream``: a real TCP server on its own thread and loop.
  ``POST /v1/trailed`` with ``{"max_tokens": N, "report": true, "delay": s}``
  answers N words as chunks of a ``text/plain`` body, then the trailer
  ``X-Usage-Cost: N`` (none when ``report`` is false), as a metered API that
  only knows its cost at the end would. ``GET /health`` answers ``ok``.
- ``read_with_trailers``: one request, the whole answer and its trailer fields.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    trailers: dict[str, str]


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, open_: set[asyncio.Task[None]]
) -> None:
    conn = h11.Connection(h11.SERVER)
    task = asyncio.current_task()
    assert task is not None
    open_.add(task)
    try:
        while True:
            request: h11.Request | None = None
            body = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await reader.read(65536)
                    conn.receive_data(data)
                    if not data:
                        return
                    continue
                if isinstance(event, h11.Request):
                    request = event
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            if request is None:
                return
            await _answer(conn, writer, request, body)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except (h11.RemoteProtocolError, ConnectionError, asyncio.CancelledError):
        return
    finally:
        open_.discard(task)
        writer.close()


async def _answer(
    conn: h11.Connection, writer: asyncio.StreamWriter, request: h11.Request, body: bytes
) -> None:
    if request.target == b"/health":
        writer.write(conn.send(h11.Response(status_code=200, headers=[("content-length", "2")])))
        writer.write(conn.send(h11.Data(data=b"ok")) + conn.send(h11.EndOfMessage()))
        await writer.drain()
        return
    terms = json.loads(body or b"{}")
    tokens, report, delay = (
        terms.get("max_tokens", 5),
        terms.get("report", True),
        terms.get("delay", 0),
    )
    headers = [("content-type", "text/plain"), ("transfer-encoding", "chunked")]
    if report:
        headers.append(("trailer", "X-Usage-Cost"))
    writer.write(conn.send(h11.Response(status_code=200, headers=headers)))
    for n in range(tokens):
        writer.write(conn.send(h11.Data(data=f"{WORDS[n % len(WORDS)]}\n".encode())))
        await writer.drain()
        if delay:
            await asyncio.sleep(delay)
    trailers = [("x-usage-cost", str(tokens))] if report else []
    writer.write(conn.send(h11.EndOfMessage(headers=trailers)))
    await writer.drain()


class TrailerUpstream:
    """The trailer-sending upstream on a thread of its own (a module fixture starts one)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()  # connections kept alive by the gateway
        self.url = ""

    def start(self) -> TrailerUpstream:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(lambda r, w: _serve(r, w, self._open), "127.0.0.1", 0),
            self.loop,
        )
        self._server = started.result(timeout=10)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        async def close(server: asyncio.Server) -> None:
            server.close()
            for task in list(self._open):
                task.cancel()
            await asyncio.gather(*self._open, return_exceptions=True)
            await server.wait_closed()

        if self._server is not None:
            asyncio.run_coroutine_threadsafe(close(self._server), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def read_with_trailers(
    url: str, *, method: str = "POST", headers: dict[str, str], body: bytes = b""
) -> Answer:
    """One HTTP/1.1 request over a fresh connection: the answer with its trailer fields."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    conn = h11.Connection(h11.CLIENT)
    sent = [("host", parts.netloc), ("content-length", str(len(body))), ("te", "trailers")]
    sent += list(headers.items())
    try:
        writer.write(conn.send(h11.Request(method=method, target=parts.path, headers=sent)))
        writer.write(conn.send(h11.Data(data=body)) if body else b"")
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        response: h11.Response | None = None
        received = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                received += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                assert response is not None
                return Answer(
                    response.status_code,
                    {n.decode().lower(): v.decode() for n, v in response.headers},
                    received,
                    {n.decode().lower(): v.decode() for n, v in event.headers},
                )
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the server closed the connection mid-answer")
    finally:
        writer.close()
        await writer.wait_closed()
