"""A stand-in LLM that streams tokens and reports what each completion used.

``POST /v1/complete`` with ``{"prompt": ..., "max_tokens": N}``: a server-sent
events stream, one ``event: token`` per token, then ``event: usage`` with
``{"cost": <tokens produced>}``: what x402srv charges (docs/selling-calls.md,
"Charging by use"). ``POST /v1/count``: the same count as JSON, reported in
the ``X-Usage-Cost`` header. ``delay`` (seconds between tokens) makes the
stream visible; the tokens are deterministic: the point is the metering.
"""

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


async def _terms(request: Request) -> tuple[int, float, bool]:
    body = await request.json()
    return int(body.get("max_tokens", 16)), float(body.get("delay", 0)), body.get("report", True)


async def complete(request: Request) -> Response:
    tokens, delay, report = await _terms(request)

    async def events() -> AsyncIterator[str]:
        for n in range(tokens):
            yield f"event: token\ndata: {json.dumps({'text': WORDS[n % len(WORDS)]})}\n\n"
            if delay:
                await asyncio.sleep(delay)
        if report:
            yield f"event: usage\ndata: {json.dumps({'cost': tokens})}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def count(request: Request) -> Response:
    tokens, _, report = await _terms(request)
    text = " ".join(WORDS[n % len(WORDS)] for n in range(tokens))
    return JSONResponse({"text": text}, headers={"X-Usage-Cost": str(tokens)} if report else {})


async def health(request: Request) -> Response:
    return Response("ok")


app = Starlette(
    routes=[
        Route("/v1/complete", complete, methods=["POST"]),
        Route("/v1/count", count, methods=["POST"]),
        Route("/health", health),
    ]
)
