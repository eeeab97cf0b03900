"""Everything the bench runs against, started as real processes and stopped by PID.

One anvil chain with our EIP-3009 token, one local facilitator built from the
official SDK (shared by x402srv's facilitator strategy and the official
middleware), one Redis with an append-only file (as docs/scaling.md asks of
production), one PostgreSQL cluster with its default durability (every commit
flushed to disk), and then, per scenario, x402srv servers (``python -m
x402srv``), the official FastAPI app (``bench.official_app`` under uvicorn) and
the seller's guarded API (``bench.seller_app``). Each x402srv server gets a
store of its own: its own sqlite file, Redis key prefix or PostgreSQL schema.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount

from x402srv.devchain import Devchain
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import (
    ServerProcess,
    _kill_group,
    free_port,
    seller_config,
    wait_for_http,
)

from .tools import ensure_binary

__all__ = ["HOURLY_AMOUNT", "Stack", "started_stack"]

REPO = Path(__file__).resolve().parents[1]
#: x402srv's "hourly" plan ($0.10 at 6 decimals); the official route costs the same.
HOURLY_AMOUNT = 100_000
GAS_KEY_ENV = "BENCH_GAS_WALLET_KEY"
#: web3's default pause between receipt polls, which the official SDK's facilitator keeps.
SDK_RECEIPT_POLL_SECONDS = 0.1


def _key(account: LocalAccount) -> str:
    return "0x" + bytes(account.key).hex()


@dataclass
class Stack:
    chain: Devchain
    directory: Path
    facilitator: FacilitatorProcess
    redis_url: str | None
    gas_wallet: LocalAccount
    postgres_dsn: str | None = None
    apps: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    servers: list[ServerProcess] = field(default_factory=list)
    configs: int = 0
    sdk_paced: FacilitatorProcess | None = None  # started by ``sdk_paced_facilitator``

    def sdk_paced_facilitator(self) -> FacilitatorProcess:
        """A second local facilitator that polls for receipts at the SDK's own 100 ms."""
        if self.sdk_paced is None:
            signer = self.chain.new_account(eth=10_000, usdc_atomic=0)
            self.sdk_paced = FacilitatorProcess(
                self.chain,
                _key(signer),
                self.directory / "facilitator-sdk-paced.log",
                receipt_poll=SDK_RECEIPT_POLL_SECONDS,
            )
        return self.sdk_paced

    @property
    def stores(self) -> list[str]:
        """The stores this machine can run: sqlite always, redis and postgres when installed."""
        found = ["sqlite"] + (["redis"] if self.redis_url else [])
        return found + (["postgres"] if self.postgres_dsn else [])

    def postgres_store(self, schema: str) -> dict[str, Any]:
        """A ``[store]`` table on a fresh PostgreSQL schema, migrated as an operator would."""
        from x402srv_postgres.testing import migrate_schema  # type: ignore[import-not-found,unused-ignore]

        assert self.postgres_dsn is not None
        migrate_schema(self.postgres_dsn, schema)
        return {"backend": "postgres", "postgres": {"dsn": self.postgres_dsn, "schema": schema}}

    def config(
        self,
        *,
        store: str,
        settlement: str,
        pay_to: str | None = None,
        store_options: Mapping[str, Any] | None = None,
        facilitator_url: str | None = None,
        facilitator_options: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A seller config for this chain: sqlite, redis or postgres; gas-wallet or facilitator."""
        self.configs += 1
        stores: dict[str, Mapping[str, Any]] = {
            "sqlite": {"backend": "sqlite", "path": "x402srv.db"},
            "redis": {
                "backend": "redis",
                "url": self.redis_url or "",
                "redis": {"key_prefix": f"bench:{self.configs}:"},
            },
        }
        if store == "postgres":
            stores["postgres"] = self.postgres_store(f"bench_{self.configs}")
        table = dict(stores[store])
        if store_options:  # ``[store.<backend>]`` options, e.g. synchronous = "FULL"
            table[store] = {**table.get(store, {}), **store_options}
        settlements: dict[str, Mapping[str, Any]] = {
            "gas-wallet": {
                "strategy": "gas-wallet",
                "gas_wallet_private_key": {"env": GAS_KEY_ENV},
            },
            "facilitator": {
                "strategy": "facilitator",
                "facilitator_url": facilitator_url or self.facilitator.url,
                **({"facilitator": dict(facilitator_options)} if facilitator_options else {}),
            },
        }
        # The unpaid-request limit stays on (its cost is part of every 402 measured), with
        # a limit no benchmark reaches: they all load from one client address.
        extra.setdefault("rate_limit", {"unpaid_requests": 100_000_000})
        return seller_config(
            rpc_url=self.chain.rpc_url,
            chain_id=self.chain.chain_id,
            asset=self.chain.token.address,
            wallet_address=pay_to or Account.create().address,
            store=table,
            settlement=settlements[settlement],
            **extra,
        )

    def x402srv(self, config: Mapping[str, Any], name: str, *, workers: int = 1) -> ServerProcess:
        """``python -m x402srv`` with ``config``, started and remembered for ``stop``."""
        server = ServerProcess(
            config,
            self.directory / name,
            workers=workers,
            env={GAS_KEY_ENV: _key(self.gas_wallet)},
        )
        self.servers.append(server)
        return server.start(timeout=60)

    def official(self, pay_to: str, facilitator_url: str | None = None) -> str:
        """The official middleware app on a free port; returns its base URL."""
        port = free_port()
        command = [
            sys.executable, "-m", "bench.official_app",
            "--port", str(port),
            "--facilitator", facilitator_url or self.facilitator.url,
            "--network", self.chain.network,
            "--asset", self.chain.token.address,
            "--pay-to", pay_to,
            "--amount", str(HOURLY_AMOUNT),
        ]  # fmt: skip
        return self._spawn(command, port, "/healthz", "official.log")

    def seller_api(self, config_path: Path) -> str:
        """The guarded seller API (``bench.seller_app``); returns its base URL."""
        port = free_port()
        command = [
            sys.executable, "-m", "bench.seller_app",
            "--config", str(config_path), "--port", str(port),
        ]  # fmt: skip
        return self._spawn(command, port, "/open", "seller-api.log")

    def mcp_upstream(self) -> str:
        """The seller's MCP server (``bench.mcp_app``); returns its base URL."""
        port = free_port()
        command = [sys.executable, "-m", "bench.mcp_app", "--port", str(port)]
        return self._spawn(command, port, "/healthz", "mcp-app.log")

    def mcp_official(self, pay_to: str, amount: int) -> str:
        """The SDK's payment wrapper on a FastMCP tool (``bench.mcp_official_app``); its URL."""
        port = free_port()
        command = [
            sys.executable, "-m", "bench.mcp_official_app",
            "--port", str(port),
            "--facilitator", self.facilitator.url,
            "--network", self.chain.network,
            "--asset", self.chain.token.address,
            "--pay-to", pay_to,
            "--amount", str(amount),
        ]  # fmt: skip
        return self._spawn(command, port, "/healthz", "mcp-official.log")

    def llm_upstream(self) -> str:
        """The docs' streaming "LLM" sample (``docs/samples/llm_stream_upstream.py``); its URL."""
        port = free_port()
        command = [
            sys.executable, "-m", "uvicorn", "llm_stream_upstream:app",
            "--app-dir", str(REPO / "docs" / "samples"),
            "--host", "127.0.0.1", "--port", str(port),
            "--no-access-log", "--log-level", "warning",
        ]  # fmt: skip
        return self._spawn(command, port, "/health", "llm-upstream.log")

    def _spawn(self, command: list[str], port: int, probe: str, log_name: str) -> str:
        with (self.directory / log_name).open("ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                # the seller API reads the same seller.toml, secret references included
                env={**os.environ, "PYTHONPATH": str(REPO), GAS_KEY_ENV: _key(self.gas_wallet)},
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{port}"
        self.apps[url] = process
        wait_for_http(url + probe, timeout=60, process=process)
        return url

    def stop_app(self, url: str) -> None:
        """Stop an app started by ``official``, ``seller_api`` and the like (by PID)."""
        process = self.apps.pop(url, None)
        if process is not None:
            _kill_group(process)

    def stop_server(self, server: ServerProcess) -> None:
        server.stop()
        if server in self.servers:
            self.servers.remove(server)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        for url in list(self.apps):
            self.stop_app(url)
        self.facilitator.stop()
        if self.sdk_paced is not None:
            self.sdk_paced.stop()


@contextlib.contextmanager
def started_stack(*, with_redis: bool = True, with_postgres: bool = True) -> Iterator[Stack]:
    """Chain, token, facilitator, Redis and PostgreSQL; everything stopped on the way out."""
    from x402srv_postgres.testing import (  # type: ignore[import-not-found,unused-ignore]
        PostgresServer,
        postgres_bin_dir,
    )
    from x402srv_redis.testing import (  # type: ignore[import-not-found,unused-ignore]
        RedisServer,
        redis_server_binary,
    )

    if with_redis and redis_server_binary() is None:
        with contextlib.suppress(RuntimeError):  # without it the Redis rows are skipped
            ensure_binary("redis-server", "redis-server")
    with (
        Devchain.start(project_dir=REPO) as chain,
        tempfile.TemporaryDirectory(prefix="x402srv-bench-") as tmp,
    ):
        directory = Path(tmp)
        signer = chain.new_account(eth=10_000, usdc_atomic=0)
        facilitator = FacilitatorProcess(chain, _key(signer), directory / "facilitator.log")
        redis = None
        if with_redis and redis_server_binary() is not None:
            redis = RedisServer(directory / "redis", appendonly=True).start()
        postgres = None
        if with_postgres and postgres_bin_dir() is not None:
            # PostgreSQL's own defaults but for the buffers a small production server has.
            postgres = PostgresServer(settings={"shared_buffers": "128MB"}).start()
        stack = Stack(
            chain=chain,
            directory=directory,
            facilitator=facilitator,
            redis_url=redis.url if redis else None,
            gas_wallet=chain.new_account(eth=10_000, usdc_atomic=0),
            postgres_dsn=postgres.dsn() if postgres else None,
        )
        try:
            yield stack
        finally:
            stack.stop()
            if redis is not None:
                redis.stop()
            if postgres is not None:
                postgres.cleanup()
