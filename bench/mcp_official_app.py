"""The comparison for paid MCP tool calls: the official SDK's payment wrapper on a FastMCP tool.

    python -m bench.mcp_official_app --port P --facilitator URL --network eip155:31337 \
        --asset 0x... --pay-to 0x... --amount 10000 [--asset-name "USD Coin"] [--asset-version 2]

What the SDK documents for a seller's own MCP server (``x402.mcp``'s
``create_payment_wrapper`` applied to a FastMCP tool function): an
``x402ResourceServer`` over the HTTP facilitator client with the exact EVM
scheme, ``accepts`` built from a price, and the wrapper on the tool. Every call
is paid: verified on the facilitator, the tool run, then settled. The tool and
the server settings are ``bench.mcp_app``'s (stateless, JSON answers), so the
same ``tools/call`` goes here and through x402srv's ``[[mcp]]`` path in front of
``bench.mcp_app``; served by uvicorn, one worker, no access log.
"""

from __future__ import annotations

import argparse
from typing import Any

from .official_app import serve

__all__ = ["build_app", "main"]


def build_app(args: argparse.Namespace) -> Any:
    from mcp.server.fastmcp import FastMCP
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from x402 import x402ResourceServer
    from x402.http import FacilitatorConfig, HTTPFacilitatorClient
    from x402.mcp.server import create_payment_wrapper
    from x402.mechanisms.evm.exact import ExactEvmServerScheme
    from x402.schemas import ResourceConfig, ResourceInfo

    server = x402ResourceServer(HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator)))
    # (the SDK's own annotations disagree with each other here; the call is as documented)
    server.register(args.network, ExactEvmServerScheme())  # type: ignore[no-untyped-call,arg-type]
    server.initialize()  # asks the facilitator what it supports: accepts need it
    price = {
        "amount": str(args.amount),
        "asset": args.asset,
        "extra": {"name": args.asset_name, "version": args.asset_version},
    }
    accepts = server.build_payment_requirements(
        ResourceConfig(
            scheme="exact",
            pay_to=args.pay_to,
            price=price,  # type: ignore[arg-type]  # an AssetAmount as a dict, as documented
            network=args.network,
            max_timeout_seconds=300,
        )
    )
    paid = create_payment_wrapper(
        server,
        accepts=accepts,
        resource=ResourceInfo(
            url="mcp://tool/forecast", description="Tomorrow's weather", mime_type="text/plain"
        ),
    )
    mcp = FastMCP("bench-tools", stateless_http=True, json_response=True, log_level="WARNING")

    @mcp.tool(name="forecast", description="Tomorrow's weather in a city")
    @paid
    def forecast(city: str) -> str:
        return f"{city}: sunny, 21 C"

    @mcp.custom_route("/healthz", methods=["GET"])  # type: ignore[untyped-decorator]
    async def healthz(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return mcp.streamable_http_app()


def main(argv: list[str] | None = None) -> None:
    serve("bench.mcp_official_app", build_app, argv)


if __name__ == "__main__":
    main()
