"""The seller's "existing API" behind the gateway: a real Starlette app under uvicorn.

It tells the tests what it received, so they can assert what the gateway
forwarded. The last path segment picks the behaviour, whatever the prefix:

- anything else: echo JSON {method, path, raw_path, query, headers, body_length,
  body_sha256, body (if short)};
- ``_upload``: read the body chunk by chunk, noting each arrival in ``/_control/received``;
- ``_drip``: send ``first``, wait until ``/_control/release`` is called, send ``second``;
- ``_big?bytes=N``: N bytes of a repeating pattern;
- ``_slow?seconds=S``: answer after S seconds;
- ``_broken``: start a 1 MB answer and die after the first chunk;
- ``_cacheable``: the echo, with every cache (CDNs too) allowed to keep it an hour;
- ``_status?code=C``: an empty answer with that status, a cookie pair and a
  hop-by-hop header the gateway must drop;
- ``/_control/jwks`` (PUT: the document to serve, ``?status=``) and
  ``/.well-known/jwks.json``: a key-set endpoint the JWKS tests steer.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

PATTERN = b"0123456789abcdef" * 4096  # 64 KiB

received: list[int] = []
release = asyncio.Event()
jwks: dict[str, Any] = {"status": 404, "document": b"{}", "fetches": 0}


async def echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse(
        {
            "method": request.method,
            "path": request.url.path,
            "raw_path": request.scope["raw_path"].decode("latin-1"),
            "query": request.scope["query_string"].decode("latin-1"),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.headers.raw],
            "body_length": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body": body.decode("utf-8", "replace") if len(body) <= 4096 else None,
        }
    )


async def upload(request: Request) -> Response:
    received.clear()
    digest = hashlib.sha256()
    async for chunk in request.stream():
        if chunk:
            received.append(len(chunk))
            digest.update(chunk)
    return JSONResponse({"chunks": len(received), "sha256": digest.hexdigest()})


async def drip(request: Request) -> Response:
    release.clear()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first;"
        await asyncio.wait_for(release.wait(), 20)
        yield b"second"

    return StreamingResponse(chunks(), media_type="text/plain")


async def big(request: Request) -> Response:
    size = int(request.query_params.get("bytes", "0"))

    async def chunks() -> AsyncIterator[bytes]:
        left = size
        while left > 0:
            piece = PATTERN[: min(left, len(PATTERN))]
            left -= len(piece)
            yield piece

    return StreamingResponse(chunks(), media_type="application/octet-stream")


async def slow(request: Request) -> Response:
    await asyncio.sleep(float(request.query_params.get("seconds", "1")))
    return JSONResponse({"slow": True})


async def broken(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield PATTERN
        raise RuntimeError("upstream died mid-answer (on purpose)")

    return StreamingResponse(chunks(), headers={"content-length": str(1024 * 1024)})


async def cacheable(request: Request) -> Response:
    """An answer the upstream lets every cache keep for an hour, CDNs included."""
    response = await echo(request)
    response.headers["cache-control"] = "public, max-age=3600"
    response.headers["cdn-cache-control"] = "max-age=3600"
    response.headers["cloudflare-cdn-cache-control"] = "max-age=3600"
    response.headers["surrogate-control"] = "max-age=3600"
    return response


async def status(request: Request) -> Response:
    response = Response(status_code=int(request.query_params["code"]))
    response.headers.append("set-cookie", "a=1")
    response.headers.append("set-cookie", "b=2")
    response.headers["keep-alive"] = "timeout=5"
    response.headers["x-x402-plan"] = "spoofed-by-upstream"
    return response


BEHAVIOURS = {
    "_cacheable": cacheable,
    "_upload": upload,
    "_drip": drip,
    "_big": big,
    "_slow": slow,
    "_broken": broken,
    "_status": status,
}


async def dispatch(request: Request) -> Response:
    last = request.url.path.rsplit("/", 1)[-1]
    return await BEHAVIOURS.get(last, echo)(request)


async def control_received(request: Request) -> Response:
    return JSONResponse({"chunks": list(received)})


async def control_release(request: Request) -> Response:
    release.set()
    return JSONResponse({"released": True})


async def control_jwks(request: Request) -> Response:
    if request.method == "PUT":
        jwks["document"] = await request.body()
        jwks["status"] = int(request.query_params.get("status", "200"))
    return JSONResponse({"fetches": jwks["fetches"]})


async def serve_jwks(request: Request) -> Response:
    jwks["fetches"] += 1
    return Response(jwks["document"], status_code=jwks["status"], media_type="application/json")


async def health(request: Request) -> Response:
    return Response(json.dumps({"ok": True}), media_type="application/json")


ALL = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]

app = Starlette(
    routes=[
        Route("/_control/health", health),
        Route("/_control/received", control_received),
        Route("/_control/release", control_release, methods=["POST"]),
        Route("/_control/jwks", control_jwks, methods=["GET", "PUT"]),
        Route("/.well-known/jwks.json", serve_jwks),
        Route("/{path:path}", dispatch, methods=ALL),
    ]
)
