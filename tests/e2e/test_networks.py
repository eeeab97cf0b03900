"""Paid on two chains in three tokens, and still selling while facilitators fail.

Everything is real: two anvil chains (ids 31337 and 31338), a 6- and an
18-decimal token on the first, facilitator processes running the official
SDK's facilitator code (a good one; one answering 500 with nothing broadcast;
gated ones that settle when the test says), a URL where nothing listens, the
gas-wallet plugin, and x402srv as a process. Buyers are the official Python
client and ``@x402/fetch``. Every test ends by counting the Transfer events on
both chains: exactly one per grant.

Run with ``-s`` to see the discovery 402 of the two-network, three-token
catalogue.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account

from tests.support.networks import (
    GAS_WALLET,
    Option,
    buy_with_official_client,
    facilitator_settler,
    funded_buyer,
    gas_wallet_env,
    nothing_listening,
    reasons,
    record,
    seller_document,
    sender,
    start,
    transfers,
    wait_for_file,
)
from tests.support.paths import REPO
from x402srv.devchain import Devchain, deploy_token, encode_call
from x402srv.testing.fixtures import FacilitatorProcess
from x402srv.testing.servers import ServerProcess

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

A, B = 31337, 31338


@pytest.fixture(scope="module")
def chain_b() -> Iterator[Devchain]:
    with Devchain.start(chain_id=B, project_dir=REPO) as chain:
        yield chain


@pytest.fixture(scope="module")
def options(devchain: Devchain, chain_b: Devchain) -> list[Option]:
    """USD Coin (6 decimals) and Dollar18 (18) on chain A; USD Coin (6) on chain B."""
    dollar18 = deploy_token(devchain.rpc, devchain.deployer, "Dollar18", "1", decimals=18)
    return [
        Option(devchain, devchain.token),
        Option(devchain, dollar18),
        Option(chain_b, chain_b.token),
    ]


@pytest.fixture(scope="module")
def good(facilitator: Callable[..., FacilitatorProcess], chain_b: Devchain) -> FacilitatorProcess:
    return facilitator(also=[chain_b])


@pytest.fixture(scope="module")
def broken(facilitator: Callable[..., FacilitatorProcess], chain_b: Devchain) -> FacilitatorProcess:
    """Answers every /settle with HTTP 500 before doing anything."""
    return facilitator("settle-500", also=[chain_b])


@pytest.fixture(scope="module")
def catalogue(
    options: list[Option],
    good: FacilitatorProcess,
    chain_b: Devchain,
    devchain: Devchain,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, str]]:
    """``(server, wallet)``: the two-network, three-token catalogue, settling through ``good``.

    One server for the tests that only buy from it; each counts the transfers it made.
    """
    wallet = Account.create().address
    document = seller_document(
        wallet,
        [
            (devchain, [options[0].token, options[1].token], [facilitator_settler(good.url)]),
            (chain_b, [options[2].token], [facilitator_settler(good.url)]),
        ],
    )
    server = start(document, tmp_path_factory.mktemp("catalogue"), {})
    yield server, wallet
    server.stop()


@pytest.fixture
def new_seller(
    tmp_path: Path,
) -> Iterator[Callable[..., tuple[ServerProcess, str]]]:
    started: list[ServerProcess] = []

    def run(
        networks: list[tuple[Devchain, list[Any], list[dict[str, Any]]]],
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> tuple[ServerProcess, str]:
        wallet = Account.create().address
        document = seller_document(wallet, networks, **kwargs)
        server = start(document, tmp_path / f"seller-{len(started)}", env or {})
        started.append(server)
        return server, wallet

    yield run
    for server in started:
        server.stop()


def label(url: str, position: int, chain: int) -> str:
    return f"facilitator {url} #{position} on eip155:{chain}"


def buy(
    server: ServerProcess, buyer: Any, option: Option, plan_id: str = "hourly"
) -> dict[str, Any]:
    response = asyncio.run(buy_with_official_client(server.access_url, buyer, option, plan_id))
    assert response.status_code == 200, response.text + "\n" + server.logs()[-6000:]
    return dict(response.json())


# ---------------------------------------------------------------- the catalogue


def test_discovery_offers_every_option_of_a_two_network_three_token_catalogue(
    catalogue: tuple[ServerProcess, str], options: list[Option]
) -> None:
    server, wallet = catalogue
    response = httpx.post(server.access_url, json={})
    assert response.status_code == 402
    body = response.json()
    print("\n--- discovery 402 of a two-network, three-token catalogue ---")
    print(json.dumps(body, indent=2))
    accepts = body["accepts"]
    assert [(a["extra"]["planId"], a["network"], a["asset"], a["amount"]) for a in accepts] == [
        ("hourly", f"eip155:{A}", options[0].token.address, "100000"),
        ("hourly", f"eip155:{A}", options[1].token.address, str(10**17)),
        ("hourly", f"eip155:{B}", options[2].token.address, "100000"),
        ("daily", f"eip155:{A}", options[0].token.address, "1500000"),
        ("daily", f"eip155:{A}", options[1].token.address, str(15 * 10**17)),
        ("daily", f"eip155:{B}", options[2].token.address, "1500000"),
    ]
    assert [a["extra"]["name"] for a in accepts[:3]] == ["USD Coin", "Dollar18", "USD Coin"]
    assert {a["payTo"] for a in accepts} == {wallet}
    assert body["networks"] == [f"eip155:{A}", f"eip155:{B}"]
    assert len(response.headers["PAYMENT-REQUIRED"]) < 8192
    challenge = httpx.post(server.access_url, json={"planId": "daily"}).json()
    assert [a["amount"] for a in challenge["accepts"]] == ["1500000", str(15 * 10**17), "1500000"]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["A 6 decimals", "A 18 decimals", "B 6 decimals"])
def test_the_official_client_buys_each_option(
    catalogue: tuple[ServerProcess, str],
    options: list[Option],
    good: FacilitatorProcess,
    index: int,
) -> None:
    """A buyer holding money in one token only pays that option; the seller gets exactly it."""
    server, wallet = catalogue
    option = options[index]
    buyer = funded_buyer(option)
    before = transfers(options, wallet)  # (the catalogue's other tests buy from it too)

    grant = buy(server, buyer, option)

    assert grant["network"] == option.network
    moved = [t for t in transfers(options, wallet) if t not in before]
    assert moved == [(option.network, grant["txHash"], 10 ** (option.token.decimals - 1))]
    assert sender(option, grant["txHash"]) == str(good.address).lower()


def test_at_x402_fetch_buys_an_option_on_the_second_chain(
    catalogue: tuple[ServerProcess, str],
    options: list[Option],
) -> None:
    server, wallet = catalogue
    option = options[2]
    buyer = funded_buyer(option)
    before = transfers(options, wallet)  # (the catalogue's other tests buy from it too)
    env = {
        **os.environ,
        "ACCESS_URL": server.access_url,
        "PLAN_ID": "hourly",
        "NETWORK": option.network,
        "TOKEN_ADDRESS": option.token.address,
        "MAX_AMOUNT": "2000000",
        "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
    }
    result = subprocess.run(
        ["node", str(REPO / "tests" / "support" / "fetch_buyer.mjs")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200, answer
    grant = answer["body"]
    assert grant["network"] == f"eip155:{B}"
    moved = [t for t in transfers(options, wallet) if t not in before]
    assert moved == [(option.network, grant["txHash"], 100_000)]


# ---------------------------------------------------------------- failover


def test_failover_past_a_refused_connection_and_a_500_settles_once(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    options: list[Option],
    good: FacilitatorProcess,
    broken: FacilitatorProcess,
    devchain: Devchain,
) -> None:
    """#1 refuses the connection: next at once. #2 answers 500 with nothing broadcast: the
    chain shows the authorization unused, next. #3 settles. One transfer, one grant."""
    down = nothing_listening()
    server, wallet = new_seller(
        [
            (
                devchain,
                [options[0].token],
                [facilitator_settler(u) for u in (down, broken.url, good.url)],
            )
        ]
    )
    buyer = funded_buyer(options[0])

    grant = buy(server, buyer, options[0])

    history = reasons(server, grant["challengeId"])
    assert f"{label(down, 1, A)} could not settle (unexpected_settle_error); trying the next" in (
        history
    )
    assert (
        f"{label(broken.url, 2, A)} could not settle (facilitator answered 500; the chain "
        "shows it unused); trying the next"
    ) in history
    assert f"settled on-chain by {label(good.url, 3, A)}" in history
    assert transfers(options, wallet) == [(options[0].network, grant["txHash"], 100_000)]
    assert sender(options[0], grant["txHash"]) == str(good.address).lower()
    logs = server.logs()
    assert f"{label(good.url, 3, A)} settled it" in logs
    assert f"{label(down, 1, A)} unreachable at start-up (ConnectError)" in logs


def test_the_gas_wallet_settles_when_every_facilitator_fails(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    options: list[Option],
    broken: FacilitatorProcess,
    devchain: Devchain,
    chain_b: Devchain,
) -> None:
    env = gas_wallet_env(devchain, chain_b)
    settlers = [
        facilitator_settler(nothing_listening()),
        facilitator_settler(broken.url),
        GAS_WALLET,
    ]
    server, wallet = new_seller(
        [(devchain, [options[1].token], settlers), (chain_b, [options[2].token], settlers)], env
    )
    grants = []
    for option in (options[1], options[2]):
        grant = buy(server, funded_buyer(option), option)
        assert f"settled on-chain by gas-wallet #3 on {option.network}" in reasons(
            server, grant["challengeId"]
        )
        grants.append((option.network, grant["txHash"], 10 ** (option.token.decimals - 1)))
    assert sorted(transfers(options, wallet)) == sorted(grants)


def test_the_circuit_breaker_skips_a_failing_facilitator_and_readyz_shows_it(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    options: list[Option],
    good: FacilitatorProcess,
    devchain: Devchain,
) -> None:
    """Two refusals in a row open #1's breaker: the third payment goes straight to #2."""
    down = nothing_listening()
    server, wallet = new_seller(
        [
            (
                devchain,
                [options[0].token],
                [facilitator_settler(down), facilitator_settler(good.url)],
            )
        ],
        breaker={"failures": 2, "cooldown_seconds": 3600},
        metrics={"enabled": True},
        server={"readiness_cache_seconds": 0},
    )
    tried_first = []
    grants = []
    for _ in range(3):
        grant = buy(server, funded_buyer(options[0]), options[0])
        grants.append((options[0].network, grant["txHash"], 100_000))
        history = reasons(server, grant["challengeId"])
        tried_first.append(any(r.startswith(label(down, 1, A)) for r in history))
        assert f"settled on-chain by {label(good.url, 2, A)}" in history
    assert tried_first == [True, True, False]
    assert sorted(transfers(options, wallet)) == sorted(grants)

    ready = httpx.get(f"{server.url}/readyz").json()
    first, second = ready["settlers"]
    assert first["settler"] == f"facilitator #1 on eip155:{A}"
    assert first["breaker"]["state"] == "open"
    assert first["check"].startswith("facilitator unreachable")
    assert (second["breaker"]["state"], second["check"]) == ("closed", "ok")
    assert ready["status"] == "ready"  # one settler of the network is enough
    exposed = httpx.get(f"{server.url}/metrics").text
    gauge = f'x402srv_settler_state{{network="eip155:{A}",settler="facilitator #1 on eip155:{A}"}}'
    assert re.search(re.escape(gauge) + r" 2(\.0)?$", exposed, re.MULTILINE), exposed
    assert down not in ready.__repr__() + exposed  # not even the port of a settler's URL


@pytest.mark.parametrize("late_one", ["wins", "loses"])
def test_a_facilitator_that_settles_after_we_moved_on(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    facilitator: Callable[..., FacilitatorProcess],
    options: list[Option],
    devchain: Devchain,
    tmp_path: Path,
    late_one: str,
) -> None:
    """#1 takes the payment and says nothing past our read timeout; the chain shows the
    authorization unused, so #2 gets it. Then both settle, in either order: the nonce lets
    one transfer through, and the grant names that one, as the chain shows its sender."""
    gate1, gate2 = tmp_path / "gate1", tmp_path / "gate2"
    gate1.mkdir()
    gate2.mkdir()
    first = facilitator("settle-gate", gate=gate1)
    second = facilitator("settle-gate", gate=gate2)
    server, wallet = new_seller(
        [
            (
                devchain,
                [options[0].token],
                [facilitator_settler(first.url), facilitator_settler(second.url)],
            )
        ]
    )
    buyer = funded_buyer(options[0])
    with ThreadPoolExecutor(1) as pool:
        bought = pool.submit(buy, server, buyer, options[0])
        wait_for_file(gate1 / "arrived-1")
        wait_for_file(gate2 / "arrived-1")  # our read timeout passed: we moved on
        late, other = (gate1, gate2) if late_one == "wins" else (gate2, gate1)
        (late / "go-1").touch()
        wait_for_file(late / "done-1")
        (other / "go-1").touch()
        grant = bought.result(timeout=120)
    wait_for_file(gate1 / "done-1")
    wait_for_file(gate2 / "done-1")

    moved = transfers(options, wallet)
    assert moved == [(options[0].network, grant["txHash"], 100_000)]
    settled_by = first if late_one == "wins" else second
    assert sender(options[0], grant["txHash"]) == str(settled_by.address).lower()
    history = reasons(server, grant["challengeId"])
    assert any(
        r.startswith(f"{label(first.url, 1, A)} could not settle (facilitator /settle: ReadTimeout")
        for r in history
    ), history
    paid = next(r for r in history if r.startswith("settled on-chain by"))
    position = 1 if late_one == "wins" else 2
    assert paid == f"settled on-chain by {label(settled_by.url, position, A)}"


def test_a_token_configured_under_the_wrong_domain_is_reported_at_start_up(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    options: list[Option],
    good: FacilitatorProcess,
    chain_b: Devchain,
    devchain: Devchain,
) -> None:
    """Every buyer's signature would fail for a token whose EIP-712 name or version is not
    the chain's: start-up compares each token's DOMAIN_SEPARATOR and names the wrong one.
    The server still starts and sells the other tokens."""
    wrong = replace(options[1].token, name="Dollar 18")  # the contract signs as "Dollar18"
    server, _ = new_seller(
        [
            (devchain, [options[0].token, wrong], [facilitator_settler(good.url)]),
            (chain_b, [options[2].token], [facilitator_settler(good.url)]),
        ]
    )
    errors = [
        json.loads(line)
        for line in server.logs().splitlines()
        if line.startswith("{") and '"level": "ERROR"' in line
    ]
    assert [e["logger"] for e in errors] == ["x402srv.settlement.domains"], errors
    message = errors[0]["message"]
    assert message.startswith(f"token {wrong.address} on eip155:{A}: its on-chain EIP-712 domain")
    assert "name='Dollar 18' version='1'" in message
    assert "networks[0]" in message
    grant = buy(server, funded_buyer(options[2]), options[2])  # the rest still sells
    assert grant["network"] == f"eip155:{B}"


def test_audit_covers_every_network_with_a_cursor_each(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    options: list[Option],
    good: FacilitatorProcess,
    chain_b: Devchain,
    devchain: Devchain,
) -> None:
    """Block numbers of one chain mean nothing on another: each network is audited from its
    own first block, every token on it; a stray transfer on the second chain is named."""
    server, wallet = new_seller(
        [
            (devchain, [options[0].token, options[1].token], [facilitator_settler(good.url)]),
            (chain_b, [options[2].token], [facilitator_settler(good.url)]),
        ]
    )
    starts = {A: devchain.rpc.block_number(), B: chain_b.rpc.block_number()}
    grants = [buy(server, funded_buyer(option), option) for option in options]
    stranger = funded_buyer(options[2])
    chain_b.fund_eth(stranger.address, 10**18)
    data = encode_call("transfer(address,uint256)", wallet, 7)
    chain_b.rpc.send_transaction(stranger, to=options[2].token.address, data=data)

    audited = subprocess.run(
        [
            sys.executable,
            "-m",
            "x402srv",
            "audit",
            "--config",
            str(server.config_path),
            "--from-block",
            f"eip155:{A}={starts[A]}",
            "--from-block",
            f"eip155:{B}={starts[B]}",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=server.directory,
    )

    assert audited.returncode == 1, audited.stdout + audited.stderr  # the stray transfer
    lines = audited.stdout.splitlines()
    assert lines[0].startswith(f"audit of eip155:{A} blocks {starts[A]}..")
    assert any(line.startswith(f"audit of eip155:{B} blocks {starts[B]}..") for line in lines)
    for grant in grants:
        assert any(
            line.startswith(f"matched    {grant['txHash']}") and grant["challengeId"] in line
            for line in lines
        ), (grant, audited.stdout)
    [stray] = [line for line in lines if line.startswith("UNMATCHED")]
    assert stray.endswith(f"from {stranger.address.lower()}: no challenge accounts for it")
    assert "4 transfers: 3 matched, 1 unmatched" in audited.stderr


def test_the_reconciler_decides_a_payment_on_the_second_chain_from_that_chain(
    new_seller: Callable[..., tuple[ServerProcess, str]],
    facilitator: Callable[..., FacilitatorProcess],
    options: list[Option],
    chain_b: Devchain,
    devchain: Devchain,
    tmp_path: Path,
) -> None:
    """A facilitator on chain B says nothing within our timeout (502, the payment pending),
    then settles. ``x402srv reconcile`` reads chain B, not chain A, and delivers the grant;
    the buyer's retry with its requestId gets it."""
    gate = tmp_path / "gate"
    gate.mkdir()
    slow = facilitator("settle-gate", gate=gate, also=[chain_b])
    server, wallet = new_seller(
        [
            (devchain, [options[0].token], [facilitator_settler(slow.url)]),
            (chain_b, [options[2].token], [facilitator_settler(slow.url)]),
        ]
    )
    option = options[2]
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            asyncio.run, buy_with_official_client(server.access_url, funded_buyer(option), option)
        )
        wait_for_file(gate / "arrived-1")
        answer = pending.result(timeout=120)  # our read timeout passed: the outcome is unknown
    assert answer.status_code == 502, answer.text
    (gate / "go-1").touch()
    wait_for_file(gate / "done-1")
    [(network, tx_hash, value)] = transfers(options, wallet)
    assert (network, value) == (f"eip155:{B}", 100_000)

    reconciled = subprocess.run(
        [
            sys.executable,
            "-m",
            "x402srv",
            "reconcile",
            "--config",
            str(server.config_path),
            "--grace-seconds",
            "0",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=server.directory,
    )

    assert "SETTLING -> PAID  resolved from chain: transferred" in reconciled.stdout
    assert "PAID -> DELIVERED" in reconciled.stdout
    challenge_id = reconciled.stdout.split()[0]
    history = record(server, challenge_id)
    assert (history["network"], history["state"], history["tx_hash"]) == (
        f"eip155:{B}",
        "DELIVERED",
        tx_hash.lower(),
    )
    again = httpx.post(
        server.access_url, json={"planId": "hourly", "requestId": history["request_id"]}
    )
    assert again.status_code == 200
    assert again.json()["txHash"] == tx_hash.lower()
