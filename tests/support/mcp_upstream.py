"""The seller's MCP server in the MCP gateway's tests: a real FastMCP app, its own process.

``uvicorn tests.support.mcp_upstream:app`` serves Streamable HTTP at ``/mcp``
(SSE answers, sessions) with a free tool, paid tools, a tool that fails, one
that streams progress, one that reports its cost in its result's ``_meta``, one
that does both, a resource and a prompt. It counts every tool run, so a
test can tell whether a call reached it: ``GET /_control/runs`` -> ``{tool: n}``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import CallToolResult, TextContent
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

RUNS: Counter[str] = Counter()

server = FastMCP("weather-tools")


@server.tool()
def ping() -> str:
    """A free tool: answers pong."""
    RUNS["ping"] += 1
    return "pong"


@server.tool()
def forecast(city: str) -> str:
    """A paid tool: tomorrow's weather in a city."""
    RUNS["forecast"] += 1
    return f"{city}: sunny, 21 C"


@server.tool()
def report(city: str) -> str:
    """A tool sold one call at a time: a long report."""
    RUNS["report"] += 1
    return f"Report for {city}: " + "fine weather. " * 3


@server.tool()
def broken(city: str) -> str:
    """A tool that always fails (its credits go back)."""
    RUNS["broken"] += 1
    raise RuntimeError(f"the weather service for {city} is down")


@server.tool()
async def count(to: int, ctx: Context[Any, Any, Any]) -> str:
    """Counts to ``to``, reporting progress and a log line per step as it goes."""
    RUNS["count"] += 1
    for step in range(1, to + 1):
        await ctx.report_progress(step, to)
        await ctx.info(f"step {step}")
        await asyncio.sleep(0.05)
    return f"counted to {to}"


@server.tool()
def echo(text: str) -> str:
    """Echoes its argument (a tool no price names: it costs the unlisted price)."""
    RUNS["echo"] += 1
    return text


@server.tool()
def summarize(text: str, report: bool = True) -> CallToolResult:
    """A tool charged by use: its result reports what it cost (one credit per word read)."""
    RUNS["summarize"] += 1
    words = len(text.split())
    meta = {"x402srv/usage": {"cost": words}} if report else None
    return CallToolResult(
        content=[TextContent(type="text", text=f"{words} words: {text[:20]}")], _meta=meta
    )


@server.tool()
async def write(words: int, ctx: Context[Any, Any, Any], delay: float = 0.05) -> CallToolResult:
    """A tool charged by use that streams: a progress event per word, then what it cost."""
    RUNS["write"] += 1
    for word in range(1, words + 1):
        await ctx.report_progress(word, words)
        await asyncio.sleep(delay)
    return CallToolResult(
        content=[TextContent(type="text", text=f"wrote {words} words")],
        _meta={"x402srv/usage": {"cost": words}},
    )


@server.resource("weather://cities")
def cities() -> str:
    """The cities the tools know."""
    return "berlin, paris, lima"


@server.prompt()
def ask(city: str) -> str:
    """A prompt about a city."""
    return f"What is the weather in {city}?"


@server.custom_route("/_control/health", methods=["GET"])  # type: ignore[untyped-decorator]
async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


@server.custom_route("/_control/runs", methods=["GET"])  # type: ignore[untyped-decorator]
async def runs(request: Request) -> JSONResponse:
    return JSONResponse(dict(RUNS))


app = server.streamable_http_app()
