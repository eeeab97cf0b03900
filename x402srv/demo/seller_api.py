"""The demo seller's own API: one paid route behind ``x402srv.guard.require_access``.

``python -m x402srv.demo.seller_api --config seller.toml --port 8000``

This is the README's seller quickstart as a running process, on purpose: a seller
keeps their API and adds the guard, built from the same ``seller.toml`` x402srv
serves (same ``[credentials]``, so the tokens x402srv issues verify here). It knows
nothing about payments; x402srv sells the tokens, this app only checks them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse, json
from sanic.worker.loader import AppLoader

from x402srv.config.models import load_config
from x402srv.guard import access_claims, require_access
from x402srv.tokens.verify import TokenVerifier

__all__ = ["create_app", "main"]

WEATHER_PATH = "/weather"


def create_app(config_path: str) -> Sanic[Any, Any]:
    """The seller's API; fails here (at start) if the config holds no usable token key."""
    verifier = TokenVerifier.from_config(load_config(config_path))
    app: Sanic[Any, Any] = Sanic("x402srv_demo_seller_api")

    @app.get(WEATHER_PATH)
    @require_access(verifier)
    async def weather(request: Request) -> HTTPResponse:
        claims = access_claims(request)
        until = datetime.fromtimestamp(claims.expires_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json(
            {
                "city": "Berlin",
                "forecast": "sunny",
                "temperatureC": 21,
                "plan": claims.plan_id,
                "payer": claims.payer,
                "accessUntil": until,
            }
        )

    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m x402srv.demo.seller_api")
    parser.add_argument("--config", required=True, help="the seller TOML x402srv serves")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    loader = AppLoader(factory=partial(create_app, args.config))
    app = loader.load()
    app.prepare(host="127.0.0.1", port=args.port, single_process=True, motd=False)
    Sanic.serve_single(primary=app)


if __name__ == "__main__":
    main()
