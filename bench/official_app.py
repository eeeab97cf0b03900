"""The comparison: a FastAPI API behind the official ``x402`` payment middleware.

    python -m bench.official_app --port P --facilitator URL --network eip155:31337 \
        --asset 0x... --pay-to 0x... --amount 100000 [--asset-name "USD Coin"] [--asset-version 2]

Exactly what the SDK documents for FastAPI (``x402.http.middleware.fastapi``):
an ``x402ResourceServer`` over the HTTP facilitator client with the exact EVM
scheme registered for the network, and one priced route. Our test token is not
one of the SDK's known assets, so the price is an ``AssetAmount`` whose
``extra`` carries the token's EIP-712 name and version (what the buyer signs
over), priced like x402srv's "hourly" plan. Served by uvicorn, one worker, no
access log: the same conditions as x402srv.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["build_app", "main"]


def build_app(args: argparse.Namespace) -> Any:
    from fastapi import FastAPI
    from x402 import x402ResourceServer
    from x402.http import FacilitatorConfig, HTTPFacilitatorClient
    from x402.http.middleware.fastapi import payment_middleware
    from x402.http.types import PaymentOption, RouteConfig
    from x402.mechanisms.evm.exact import ExactEvmServerScheme

    server = x402ResourceServer(HTTPFacilitatorClient(FacilitatorConfig(url=args.facilitator)))
    # (the SDK's own annotations disagree with each other here; the call is as documented)
    server.register(args.network, ExactEvmServerScheme())  # type: ignore[no-untyped-call,arg-type]
    price = {
        "amount": str(args.amount),
        "asset": args.asset,
        "extra": {"name": args.asset_name, "version": args.asset_version},
    }
    routes = {
        "GET /weather": RouteConfig(
            accepts=PaymentOption(
                scheme="exact",
                pay_to=args.pay_to,
                price=price,  # type: ignore[arg-type]  # an AssetAmount as a dict, as documented
                network=args.network,
                max_timeout_seconds=300,
            ),
            description="One hour of API access",
            mime_type="application/json",
        )
    }
    app = FastAPI()
    middleware = payment_middleware(routes, server)

    @app.middleware("http")
    async def x402_payment(request: Any, call_next: Any) -> Any:
        return await middleware(request, call_next)

    @app.get("/weather")
    async def weather() -> dict[str, Any]:
        return {"city": "Berlin", "forecast": "sunny", "temperatureC": 21}

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main(argv: list[str] | None = None) -> None:
    serve("bench.official_app", build_app, argv)


def serve(
    prog: str, build: Callable[[argparse.Namespace], Any], argv: list[str] | None = None
) -> None:
    """Parse the seller's terms (the same for every official app) and serve ``build(args)``."""
    import uvicorn

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--facilitator", required=True)
    parser.add_argument("--network", required=True)
    parser.add_argument("--asset", required=True)
    parser.add_argument("--pay-to", required=True)
    parser.add_argument("--amount", type=int, required=True)
    parser.add_argument("--asset-name", default="USD Coin")
    parser.add_argument("--asset-version", default="2")
    args = parser.parse_args(argv)
    uvicorn.run(
        build(args), host="127.0.0.1", port=args.port, access_log=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
