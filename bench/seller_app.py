"""The seller's own API for the guard scenario: one handler, guarded and not.

    python -m bench.seller_app --config seller.toml --port P

``GET /weather`` runs behind ``x402srv.guard.require_access`` (the README's
seller quickstart); ``GET /open`` is the very same handler without it, so the
difference between the two is what the guard costs. Sanic, one worker, no
access log, as x402srv itself runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from sanic import Request, Sanic
from sanic.response import HTTPResponse, json

from x402srv.config.models import load_config
from x402srv.guard import require_access
from x402srv.tokens.verify import TokenVerifier

__all__ = ["build_app", "main"]


def build_app(config_path: str) -> Sanic[Any, Any]:
    verifier = TokenVerifier.from_config(load_config(config_path))
    app: Sanic[Any, Any] = Sanic("bench_seller_api", configure_logging=False)
    app.config.ACCESS_LOG = False

    async def weather(request: Request) -> HTTPResponse:
        return json({"city": "Berlin", "forecast": "sunny", "temperatureC": 21})

    app.add_route(require_access(verifier)(weather), "/weather", methods=["GET"], name="guarded")
    app.add_route(weather, "/open", methods=["GET"], name="open")
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.seller_app")
    parser.add_argument("--config", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = build_app(args.config)
    app.prepare(host="127.0.0.1", port=args.port, single_process=True, access_log=False, motd=False)
    Sanic.serve_single(primary=app)


if __name__ == "__main__":
    main()
