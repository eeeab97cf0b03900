"""Fixtures for the core's tests: real seller servers on the session's anvil.

``seller`` is parametrized over the settlement strategies, so every end-to-end
and error-table test runs once with the gas wallet and once through a real
facilitator (the official SDK's, in its own process).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.fixture_scopes import current_scope
from tests.support.paths import SAMPLES
from tests.support.seller import JWT_SECRET, Seller, settlement_table
from x402srv.devchain import Devchain
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import ServerProcess, free_port, seller_config


@dataclass
class Running:
    """The sellers ``start_seller`` started and nobody stopped yet, with the scope they serve."""

    sellers: list[tuple[str, Seller]] = field(default_factory=list)

    def add(self, seller: Seller) -> None:
        # A fixture being set up owns it; otherwise the test's own body started it.
        self.sellers.append((current_scope(), seller))

    def stop(self, scope: str | None = None) -> None:
        """Stop those of ``scope`` (all with None), all at once: each stop mostly waits."""
        stopping = [s for o, s in self.sellers if scope is None or o == scope]
        self.sellers = [(o, s) for o, s in self.sellers if scope is not None and o != scope]
        if stopping:
            with ThreadPoolExecutor(len(stopping)) as pool:
                list(pool.map(lambda seller: seller.server.stop(), stopping))


@pytest.fixture(scope="session")
def running_sellers() -> Running:
    return Running()


@pytest.fixture(scope="module", autouse=True)
def _stop_the_sellers_of_a_module(running_sellers: Running) -> Iterator[None]:
    """Sellers of a module's module-scoped fixtures stop when its tests are done.

    An idle server is not free: its timers and background passes take about 0.2 s
    of CPU a minute, and the chain answers its polls; kept to the end of the
    session, the hundred-odd servers the tests start would take a good part of a
    core. Those of session-scoped fixtures stay to the end of the session.
    """
    yield
    running_sellers.stop("module")


@pytest.fixture(autouse=True)
def _stop_the_sellers_of_a_test(running_sellers: Running) -> Iterator[None]:
    """A seller a test (or its function-scoped fixtures) started stops when the test ends."""
    yield
    running_sellers.stop("function")


@pytest.fixture(scope="session")
def start_seller(
    devchain: Devchain,
    facilitator: Callable[..., FacilitatorProcess],
    tmp_path_factory: pytest.TempPathFactory,
    running_sellers: Running,
) -> Iterator[Callable[..., Seller]]:
    """``start_seller(strategy, **config overrides) -> Seller``.

    A seller stops at the end of the scope that started it: the test's, its
    module's (a module-scoped fixture), or the session's.
    Its agent card says ``http://127.0.0.1`` (no port) unless ``real_card_url`` is set.
    """
    shared_facilitator: list[str] = []

    def start(
        strategy: str = "gas-wallet",
        *,
        workers: int = 1,
        facilitator_url: str | None = None,
        settlement: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        real_card_url: bool = False,
        **overrides: Any,
    ) -> Seller:
        directory: Path = tmp_path_factory.mktemp(f"seller-{strategy}")
        wallet = Account.create().address
        env = dict(env or {})
        if strategy == "facilitator" and facilitator_url is None:
            if not shared_facilitator:
                shared_facilitator.append(facilitator().url)
            facilitator_url = shared_facilitator[0]
        table = settlement or settlement_table(strategy, devchain, facilitator_url, env)
        config = seller_config(
            rpc_url=devchain.rpc_url,
            chain_id=devchain.chain_id,
            asset=devchain.token.address,
            wallet_address=wallet,
            store=overrides.pop("store", {"backend": "sqlite", "path": "x402srv.db"}),
            settlement=table,
            credentials=overrides.pop("credentials", {"secret": JWT_SECRET}),
            **overrides,
        )
        port = free_port()
        if real_card_url:  # the card's URLs reach this server (the a2a-sdk client follows them)
            config["seller"]["agent_url"] = f"http://127.0.0.1:{port}"
        server = ServerProcess(config, directory, workers=workers, env=env, port=port).start()
        seller = Seller(server, wallet, strategy, config, devchain)
        running_sellers.add(seller)
        return seller

    yield start
    running_sellers.stop()


@pytest.fixture(scope="session", params=["gas-wallet", "facilitator"])
def seller(request: pytest.FixtureRequest, start_seller: Callable[..., Seller]) -> Seller:
    """One running seller per settlement strategy, shared by the tests of that strategy."""
    return start_seller(request.param)


@pytest.fixture(scope="session")
def echo_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    """The seller's existing API behind a gateway (``tests/integrations/apps/echo_upstream.py``).

    One for the session: it echoes each request, and the tests that read its
    notes (``/_control/received``) clear them first.
    """
    log = tmp_path_factory.mktemp("echo-upstream") / "upstream.log"
    process = AppProcess("tests.integrations.apps.echo_upstream:app", log).start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def llm_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    """The docs' streaming "LLM" (``docs/samples/llm_stream_upstream.py``), one per module.

    It streams a completion token by token and reports its token count in a last SSE
    event, as the "Selling calls" page shows; metered gateway routes sit in front of it.
    """
    app = AppProcess(
        "llm_stream_upstream:app",
        tmp_path_factory.mktemp("llm-stream") / "llm.log",
        health="/health",
        app_dir=SAMPLES,
    ).start()
    yield app
    app.stop()


@pytest.fixture
def buyer(devchain: Devchain) -> LocalAccount:
    """A fresh buyer with ETH and 100 test USDC."""
    return devchain.new_account()


@pytest.fixture
def request_id() -> str:
    return str(__import__("uuid").UUID(bytes=secrets.token_bytes(16), version=4))


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of our own for the core's Redis-backed tests, stopped by PID."""
    from x402srv_redis.testing import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed")
    with RedisServer(tmp_path_factory.mktemp("redis"), appendonly=True) as server:
        yield server.url
