"""Revocation never fails open: named regressions of a store outage before the first read.

An x402srv worker that had never read the revocation list when its store went
away used to publish ``{"revoked": []}`` with 200 and a fresh ``generatedAt``:
the verifiers that poll it forgot the revocations they knew, and its own
gateway forwarded revoked tokens. Each test here failed that way.

``x402srv serve`` checks its store before it starts workers (it exits 1 when
the store is unreachable), and each worker reads the list before it accepts a
connection. So each server here starts with the store up, then loses its
store, and then its worker dies (``kill -9``): the worker the supervisor starts
in its place is exactly a worker that starts during an outage.

Everything is real: a ``redis-server`` of this module's own (stopped and
started again by PID, its append-only file keeping the list across the
outage), x402srv processes in gateway mode in front of the echo upstream,
purchases by the official x402 client on the session's anvil, the revocation
through the admin API, and the three verifiers that read the published list
(the ASGI middleware, the Sanic guard, ``verify_access_token_sync``) as their
own processes.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.apps import AppProcess
from tests.support.console import ADMIN_TOKEN, Console
from tests.support.gateway import AGENT_URL, eddsa_credentials, gateway_routes
from tests.support.leaks import process_stat
from tests.support.problems import assert_problem
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.errors import RevocationsUnavailable
from x402srv.testing.buyers import paying_client
from x402srv.testing.servers import ServerProcess, free_port
from x402srv.tokens.revocation import LIST_PATH, RevocationList

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

REFRESH = 1.0
#: How long the tests wait for a state a refresh brings (a slow, shared CI machine).
DEADLINE = 20.0


@dataclass(frozen=True)
class Scene:
    """A Redis with one revoked grant and one that stands, and the config that reads it."""

    redis: Any  # x402srv_redis.testing.RedisServer (the plugin's test helper)
    seller: Seller  # instance A: bought both grants, revoked one in its admin API
    config: dict[str, Any]  # A's config without [admin]: the instances started in an outage
    revoked_id: str
    revoked: str  # the revoked grant's token
    good: str  # a token whose grant stands
    directory: Path


class Ticks:
    """A monotonic clock the test moves: a poller's refresh comes when the test says."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _gateway_token(seller: Seller, account: Any) -> tuple[str, str]:
    """The official client buys through A's gateway: (its token, its challengeId)."""
    http, _ = paying_client(account)
    async with http:
        paid = await http.get(f"{seller.server.url}/api/forecast")
    assert paid.status_code == 200, paid.text
    grant = json.loads(base64.b64decode(paid.headers["x-x402-grant"]))
    return paid.headers["x-x402-access-token"], grant["challengeId"]


@pytest.fixture(scope="module")
async def scene(
    start_seller: Callable[..., Seller],
    echo_upstream: AppProcess,
    devchain: Devchain,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Scene]:
    from x402srv_redis.testing import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        pytest.skip("redis-server is not installed")
    directory = tmp_path_factory.mktemp("revocation-outage")
    redis = RedisServer(directory / "redis", appendonly=True, appendfsync="always").start()
    try:
        a = start_seller(
            "gas-wallet",
            routes=gateway_routes(echo_upstream.url),
            credentials=eddsa_credentials("outage-k1"),
            store={"backend": "redis", "url": redis.url},
            admin={"token": ADMIN_TOKEN, "port": free_port()},
            revocation={"refresh_seconds": REFRESH},
        )
        revoked, revoked_id = await _gateway_token(a, devchain.new_account())
        good, _ = await _gateway_token(a, devchain.new_account())
        console = Console(a, f"http://127.0.0.1:{a.config['admin']['port']}/admin")
        answer = console.post(f"/grants/{revoked_id}/revoke", {"reason": "chargeback"})
        assert answer.status_code == 200, answer.text
        config = copy.deepcopy(a.config)
        del config["admin"]
        yield Scene(redis, a, config, revoked_id, revoked, good, directory)
    finally:
        redis.stop()


def _fresh_worker(
    scene: Scene, name: str, port: int | None = None, config: dict[str, Any] | None = None
) -> ServerProcess:
    """An x402srv with two supervised workers (one worker would serve in the main process)."""
    server = ServerProcess(
        config or scene.config,
        scene.directory / name,
        workers=2,
        env=scene.seller.server.env,
        port=port or free_port(),
    )
    return server.start()


def _worker_restarted(server: ServerProcess) -> None:
    """Kill ``server``'s workers; those the supervisor starts instead read no list (outage).

    Waits for them: the listening socket stays with the main process, so the
    next connection queues until a new worker takes it.
    """
    assert server.process is not None
    main = server.process.pid
    deadline = time.monotonic() + DEADLINE
    while "2 workers serving" not in server.logs():  # (one that never served stops them all)
        assert time.monotonic() < deadline, "the workers never said they were serving"
        time.sleep(0.05)
    killed = _children(main)
    assert len(killed) == 2, f"expected two workers, found {killed}"
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + DEADLINE
    while len(_children(main) - killed) < 2:
        assert time.monotonic() < deadline, "no workers were started in place of the killed ones"
        time.sleep(0.05)
    httpx.get(f"{server.url}/.well-known/agent.json", timeout=DEADLINE).raise_for_status()


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (from /proc: Linux, as the supervisor)."""
    found = set()
    for entry in Path("/proc").iterdir():
        stat = process_stat(entry.name) if entry.name.isdigit() else None
        if stat is not None and stat[0] == pid and stat[1] not in ("Z", "X"):
            found.add(int(entry.name))
    return found


@contextmanager
def _outage(scene: Scene) -> Iterator[None]:
    """Redis stopped; started again (same port, same data) at the end if the test did not."""
    scene.redis.stop()
    try:
        yield
    finally:
        if scene.redis.process is None:
            scene.redis.start()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _once_not_503(url: str, token: str | None = None) -> httpx.Response:
    """The first answer of ``url`` that is not 503 (the store back, a refresh later)."""
    headers = _bearer(token) if token is not None else {}
    deadline = time.monotonic() + DEADLINE
    while True:
        answer = httpx.get(url, headers=headers, timeout=10)
        if answer.status_code != 503:
            return answer
        assert time.monotonic() < deadline, f"{url} still answers 503 after {DEADLINE} s"
        time.sleep(0.1)


async def test_a_worker_that_never_read_the_list_publishes_503_not_an_empty_list(
    scene: Scene,
) -> None:
    server = _fresh_worker(scene, "list-publisher")
    url = f"{server.url}{LIST_PATH}"
    try:
        with _outage(scene):
            _worker_restarted(server)
            for _ in range(3):  # every answer, however often asked, while no read succeeded
                answer = httpx.get(url, timeout=10)
                problem = assert_problem(answer, 503, "STORE_UNAVAILABLE")
                assert int(answer.headers["retry-after"]) >= 1
                assert "revoked" not in problem
            await _assert_refuses_every_token(RevocationList(url, refresh_seconds=REFRESH), scene)

            scene.redis.start()  # the outage ends: the same worker reads the list, says when
            recovered = _once_not_503(url)
            assert recovered.status_code == 200, recovered.text
            body = recovered.json()
            assert [entry["jti"] for entry in body["revoked"]] == [scene.revoked_id]
            assert set(body) == {"revoked", "refreshSeconds", "generatedAt", "readAt"}
            assert body["readAt"] <= body["generatedAt"] <= body["readAt"] + 2 * REFRESH + 5
    finally:
        server.stop()


async def _assert_refuses_every_token(poller: RevocationList, scene: Scene) -> None:
    """A poller that has never read a list: 503 whatever the token, async and blocking."""
    for challenge_id in (scene.revoked_id, "a-grant-that-stands"):
        with pytest.raises(RevocationsUnavailable) as refused:
            await poller.is_revoked(challenge_id)
        assert refused.value.status == 503 and refused.value.retry_after == 1
        with pytest.raises(RevocationsUnavailable):
            poller.is_revoked_sync(challenge_id)
    assert not poller.freshness().read


async def test_a_poller_whose_publisher_was_never_reachable_refuses_every_token(
    scene: Scene,
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}{LIST_PATH}"
    await _assert_refuses_every_token(RevocationList(nobody, refresh_seconds=REFRESH), scene)


def test_a_worker_reads_the_list_before_it_accepts_a_connection(scene: Scene) -> None:
    """Not at its first request: a burst of them would all wait on, or fail with, that read.

    (200 calls at once right after start-up used to get 503s under load:
    tests/metering/test_concurrency.py.) The store goes away before any request
    reaches the new workers: only a list read at start-up can answer then.

    The refresh is an hour here: with the scene's one second, a refresh could
    read the list between the start and the outage (CI saw one land while
    Redis was stopping), and the 200 would prove nothing about start-up.
    """
    config = copy.deepcopy(scene.config)
    config["revocation"] = {"refresh_seconds": 3600}
    server = _fresh_worker(scene, "primed", config=config)
    answering = time.time()  # start() returns once the server answers
    try:
        with _outage(scene):
            answer = httpx.get(f"{server.url}{LIST_PATH}", timeout=10)
            assert answer.status_code == 200, answer.text  # a worker with no list says 503
            assert answer.json()["readAt"] < answering
            assert [entry["jti"] for entry in answer.json()["revoked"]] == [scene.revoked_id]
    finally:
        server.stop()


def test_a_list_served_from_an_old_copy_carries_the_time_it_was_read(scene: Scene) -> None:
    """A worker that did read the list keeps serving it in an outage, with the old ``readAt``."""
    url = f"{scene.seller.server.url}{LIST_PATH}"
    first = httpx.get(url, timeout=10).json()
    assert [entry["jti"] for entry in first["revoked"]] == [scene.revoked_id]
    with _outage(scene):
        deadline = time.monotonic() + DEADLINE
        while True:  # until an answer made well after the last read
            later = httpx.get(url, timeout=10).json()
            if later["generatedAt"] > later["readAt"] + 3 * REFRESH:
                break
            assert time.monotonic() < deadline, f"readAt still moves: {later}"
            time.sleep(0.2)
        assert later["readAt"] <= first["readAt"] + 2 * REFRESH  # the last read before the stop
        assert [entry["jti"] for entry in later["revoked"]] == [scene.revoked_id]


def test_the_gateway_refuses_a_revoked_token_while_the_list_was_never_read(
    scene: Scene,
) -> None:
    server = _fresh_worker(scene, "gateway")
    route = f"{server.url}/api/forecast"
    try:
        with _outage(scene):
            _worker_restarted(server)
            for token in (scene.revoked, scene.good):  # it cannot tell one from the other yet
                answer = httpx.get(route, headers=_bearer(token), timeout=10)
                assert_problem(answer, 503, "REVOCATIONS_UNAVAILABLE")  # the gateway's: no echo
                assert int(answer.headers["retry-after"]) >= 1
                assert token not in answer.text

            scene.redis.start()  # the gateway reads the list at its next refresh
            assert_problem(_once_not_503(route, scene.revoked), 401, "TOKEN_REVOKED")
            forwarded = _once_not_503(route, scene.good)  # (the other worker reads it too)
            assert forwarded.status_code == 200, forwarded.text
            assert forwarded.json()["path"] == "/api/forecast"
    finally:
        server.stop()


def test_a_poller_keeps_a_revocation_when_its_publisher_answers_503_or_is_gone(
    scene: Scene,
) -> None:
    """The publisher is redeployed, loses its store before its first read (503), then goes."""
    port = free_port()
    publisher = _fresh_worker(scene, "publisher", port=port)
    ticks = Ticks()
    poller = RevocationList(f"{publisher.url}{LIST_PATH}", refresh_seconds=REFRESH, monotonic=ticks)
    try:
        assert poller.is_revoked_sync(scene.revoked_id)

        publisher.stop()
        publisher = _fresh_worker(scene, "publisher-again", port=port)  # the new version
        outage_began = time.time()
        with _outage(scene):
            _worker_restarted(publisher)
            ticks.now += REFRESH
            assert poller.is_revoked_sync(scene.revoked_id)  # kept: the publisher said 503
            assert httpx.get(poller.url, timeout=10).status_code == 503
            stale = poller.freshness()
            assert stale.read and stale.last_error == "HTTP 503"
            assert stale.read_at is not None and stale.read_at <= outage_began
            assert stale.age_seconds is not None and stale.age_seconds >= REFRESH

            publisher.stop()  # unreachable now
            ticks.now += REFRESH
            assert poller.is_revoked_sync(scene.revoked_id)
            assert poller.freshness().last_error == "ConnectError"
    finally:
        publisher.stop()


@dataclass(frozen=True)
class Guards:
    """The seller's own API three ways, reading the list at ``list_port`` (nothing there yet)."""

    list_port: int
    urls: dict[str, str]  # name -> URL of the guarded route


@pytest.fixture(scope="module")
def guards(scene: Scene, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guards]:
    """The ASGI middleware, the Sanic guard and ``verify_access_token_sync``, own processes."""
    list_port = free_port()
    env = {
        "X402SRV_TEST_CONFIG": str(scene.seller.server.config_path),
        "X402SRV_TEST_JWKS_URL": f"{scene.seller.server.url}/.well-known/jwks.json",
        "X402SRV_TEST_AUDIENCE": AGENT_URL,
        "X402SRV_TEST_REVOCATIONS_URL": f"http://127.0.0.1:{list_port}{LIST_PATH}",
        "X402SRV_TEST_REVOCATIONS_REFRESH": str(REFRESH),
        **scene.seller.server.env,
    }
    logs = tmp_path_factory.mktemp("outage-guards")
    apps = {
        "asgi middleware (FastAPI)": AppProcess(
            "tests.integrations.apps.fastapi_seller:app", logs / "fastapi.log", env=env
        ),
        "sanic guard": AppProcess(
            "tests.integrations.apps.sanic_seller", logs / "sanic.log", env=env, uvicorn=False
        ),
        "verify_access_token_sync (WSGI)": AppProcess(
            "tests.integrations.apps.wsgi_seller", logs / "wsgi.log", env=env, uvicorn=False
        ),
    }
    for app in apps.values():
        app.start()
    yield Guards(list_port, {name: f"{app.url}/api/weather" for name, app in apps.items()})
    for app in apps.values():
        app.stop()


def test_every_guard_refuses_tokens_until_it_has_read_the_list(
    scene: Scene, guards: Guards
) -> None:
    """Never read: 503 for every token (a 401 would send a good buyer to pay again)."""
    publisher = _fresh_worker(scene, "guards-publisher", port=guards.list_port)
    try:
        with _outage(scene):
            _worker_restarted(publisher)
            for name, url in guards.urls.items():
                for token in (scene.revoked, scene.good):
                    answer = httpx.get(url, headers=_bearer(token), timeout=10)
                    assert_problem(answer, 503, "REVOCATIONS_UNAVAILABLE")
                    assert int(answer.headers["retry-after"]) >= 1, name

            scene.redis.start()  # the publisher reads its store, the guards their list
            for name, url in guards.urls.items():
                assert_problem(_once_not_503(url, scene.revoked), 401, "TOKEN_REVOKED")
                accepted = httpx.get(url, headers=_bearer(scene.good), timeout=10)
                assert accepted.status_code == 200, (name, accepted.text)
    finally:
        publisher.stop()
