"""A reverse proxy that appends to ``X-Forwarded-For``, as nginx's ``$proxy_add_x_forwarded_for``.

The rate-limit tests put it in front of x402srv to see which entry of the
header counts as the client: the client may send any ``X-Forwarded-For`` it
likes, and this proxy, like nginx, keeps what it sent and appends the address
the connection came from. It forwards every request to ``X402SRV_TEST_UPSTREAM``
(method, path, query, body, headers but ``Host``) and answers with what the
upstream answered. ``/_control/health`` is its own.
"""

from __future__ import annotations

import os

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

UPSTREAM = os.environ.get("X402SRV_TEST_UPSTREAM", "http://127.0.0.1:1")
_DROPPED = {"host", "content-length", "connection", "transfer-encoding"}


async def forward(request: Request) -> Response:
    peer = request.client.host if request.client else "unknown"
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROPPED]
    sent = ", ".join(request.headers.getlist("x-forwarded-for"))
    headers = [(k, v) for k, v in headers if k.lower() != "x-forwarded-for"]
    headers.append(("X-Forwarded-For", f"{sent}, {peer}" if sent else peer))
    url = UPSTREAM + request.url.path + (f"?{request.url.query}" if request.url.query else "")
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        answer = await client.request(
            request.method, url, headers=headers, content=await request.body()
        )
    kept = {k: v for k, v in answer.headers.items() if k.lower() not in _DROPPED}
    kept.pop("content-encoding", None)  # httpx decoded the body
    return Response(answer.content, answer.status_code, kept)


async def health(request: Request) -> Response:
    return Response("ok")


app = Starlette(
    routes=[
        Route("/_control/health", health),
        Route("/{path:path}", forward, methods=["GET", "POST", "PUT", "DELETE", "HEAD"]),
    ]
)
