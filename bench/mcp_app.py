"""The seller's MCP server for the MCP scenario: one tool, FastMCP, stateless JSON answers.

    python -m bench.mcp_app --port P

Stateless (no ``Mcp-Session-Id``) and JSON answers (no SSE), so each
``tools/call`` is one self-contained POST that wrk can repeat: the same
request goes to this server directly and through x402srv's ``[[mcp]]`` path.
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.fastmcp import FastMCP
from starlette.requests import Request
from starlette.responses import PlainTextResponse

__all__ = ["main", "server"]

server = FastMCP("bench-tools", stateless_http=True, json_response=True, log_level="WARNING")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city (a fixed answer: the bench measures the path, not the tool)."""
    return f"{city}: sunny, 21 C"


@server.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
async def healthz(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.mcp_app")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
