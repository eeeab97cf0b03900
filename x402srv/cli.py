"""The ``x402srv`` command (SPEC 3).

    x402srv --config FILE [--host H] [--port P] [--workers N]   serve (the main job)
    x402srv check --config FILE                                  validate, print resolved config
    x402srv plugins                                              list plugins and what they register

Exit codes: 0 ok, 2 bad usage or config, 1 anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

from pydantic import ValidationError

from .config import Config, ServerConfig, load_config
from .errors import ConfigError, StoreUnavailable
from .logs import configure_logging
from .registry import Built, Registry

__all__ = ["main"]

COMMANDS = ("serve", "check", "plugins")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="x402srv",
        description="Payment-gated access server (x402 v2, A2A agent card, bearer tokens).",
        epilog="Without a command, x402srv serves: x402srv --config seller.toml",
    )
    commands = parser.add_subparsers(dest="command", metavar="{serve,check,plugins}")
    serve = commands.add_parser("serve", help="serve the access endpoint (default)")
    serve.add_argument("--config", required=True, help="seller TOML file")
    serve.add_argument("--host", help="override [server] host")
    serve.add_argument("--port", type=int, help="override [server] port")
    serve.add_argument("--workers", type=int, help="override [server] workers")
    check = commands.add_parser("check", help="validate a config and print it without secrets")
    check.add_argument("--config", required=True, help="seller TOML file")
    commands.add_parser("plugins", help="list installed plugins")
    return parser


def _with_overrides(config: Config, overrides: dict[str, Any]) -> Config:
    """``--host/--port/--workers`` replace [server] keys, with the same validation."""
    updates = {key: value for key, value in overrides.items() if value is not None}
    if not updates:
        return config
    try:
        server = ServerConfig.model_validate({**config.server.model_dump(), **updates})
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        raise ConfigError(f"--{first['loc'][0]}: {first['msg']}") from None
    return config.model_copy(update={"server": server})


def build_app(config_path: str, overrides: dict[str, Any]) -> Any:
    """App factory for Sanic's worker processes (each worker builds its own app)."""
    from .app import create_app

    return create_app(_with_overrides(load_config(config_path), overrides))


def _serve(args: argparse.Namespace) -> int:
    from sanic import Sanic
    from sanic.worker.loader import AppLoader

    overrides = {"host": args.host, "port": args.port, "workers": args.workers}
    config = _with_overrides(load_config(args.config), overrides)
    # Fail here, with exit code 2 and one clear message, not inside a worker.
    asyncio.run(_preflight(Registry().build(config)))
    server = config.server
    loader = AppLoader(factory=partial(build_app, args.config, overrides))
    app = loader.load()
    single = server.workers == 1
    app.prepare(
        host=server.host,
        port=server.port,
        workers=server.workers,
        single_process=single,
        access_log=False,
        motd=False,
    )
    logging.getLogger("x402srv").info(
        "serving %s on http://%s:%d with %d worker(s)",
        config.access_url,
        server.host,
        server.port,
        server.workers,
    )
    if single:
        Sanic.serve_single(primary=app)
    else:
        Sanic.serve(primary=app, app_loader=loader)
    return 0


async def _preflight(built: Built) -> None:
    """Open and close every plugin once: unreachable stores, unsupported networks, wrong chains."""
    await built.store.open()
    try:
        await built.store.ping()
        await built.settler.start()
        await built.settler.close()
        await built.issuer.start()
        await built.issuer.close()
    finally:
        if built.chain is not None:
            await built.chain.close()
        await built.store.close()


def _check(args: argparse.Namespace) -> int:

    config = load_config(args.config)
    Registry().build(config)
    print(json.dumps(config.describe(), indent=2))
    print("config OK", file=sys.stderr)
    return 0


def _plugins(args: argparse.Namespace) -> int:

    for row in Registry().describe():
        kinds = "; ".join(
            f"{kind}: {', '.join(names)}" for kind, names in row.items() if isinstance(names, list)
        )
        print(f"{row['plugin']} ({row['distribution']})  {kinds}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or (args_list[0] not in COMMANDS and args_list[0] not in ("-h", "--help")):
        args_list.insert(0, "serve")
    args = _parser().parse_args(args_list)
    configure_logging()
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "plugins":
            return _plugins(args)
        return _serve(args)
    except ConfigError as exc:
        print(f"x402srv: configuration error: {exc}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"x402srv: the store cannot be reached: {exc.detail}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
