"""The "Selling calls" worked example, run as written: an LLM app selling 1,000 calls for $1.

x402srv serves ``seller.toml`` with the plan of ``docs/samples/llm-seller.toml``;
``docs/samples/llm_app.py`` runs under uvicorn in the same directory, metering
each completion in the store x402srv credits. Each buyer program (the official
Python client, ``@x402/fetch``) buys the plan, makes 1,001 completions with the
token it got, tops the same grant up when the 1,001st finds the credits spent,
and ends with 999 left. The chain shows exactly two $1 payments per buyer.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.paths import REPO, SAMPLES
from tests.support.seller import Seller
from x402srv.devchain import Devchain

pytestmark = pytest.mark.slow  # a long file: ./run test starts it first (conftest.py)

CALLS = 1001
ONE_DOLLAR = 1_000_000
NODE_BIN = REPO / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def llm_seller(start_seller: Callable[..., Seller]) -> Seller:
    plans = tomllib.loads((SAMPLES / "llm-seller.toml").read_text())["plans"]
    return start_seller("gas-wallet", plans=plans)


@pytest.fixture(scope="module")
def llm_app(llm_seller: Seller, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppProcess]:
    app = AppProcess(
        "llm_app:app",
        tmp_path_factory.mktemp("llm") / "llm.log",
        env=llm_seller.server.env,
        health="/openapi.json",
        cwd=llm_seller.server.directory,  # where x402srv's seller.toml is
        app_dir=SAMPLES,
    ).start()
    yield app
    app.stop()


def _run(
    command: list[str],
    seller: Seller,
    app: AppProcess,
    devchain: Devchain,
    buyer: LocalAccount,
    tmp: Path | None = None,
) -> list[str]:
    env = {
        **os.environ,
        # tsx keeps its cache and IPC pipes in <tmpdir>/tsx-<uid> and never removes them.
        **({"TMPDIR": str(tmp)} if tmp is not None else {}),
        "ACCESS_URL": seller.access_url,
        "LLM_URL": app.url,
        "PAY_TO": seller.wallet,
        "NETWORK": devchain.network,
        "TOKEN_ADDRESS": devchain.token.address,
        "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
        "CALLS": str(CALLS),
    }
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def _paid(devchain: Devchain, seller: Seller, buyer: LocalAccount) -> list[int]:
    return [
        log.value
        for log in devchain.transfer_logs(to=seller.wallet)
        if log.from_address.lower() == buyer.address.lower()
    ]


def _check(lines: list[str]) -> None:
    assert lines[0].startswith("bought: llm-1k until ")
    assert lines[1].startswith("topped up: 1000 calls, tx 0x")
    assert lines[2] == f"completions: {CALLS} top-ups: 1"
    digest = hashlib.sha256(f"Question {CALLS}?".encode()).hexdigest()[:8]
    assert lines[3] == f"last: Question {CALLS}? ... [{digest}]"
    assert lines[4].startswith('RateLimit: "credits";r=999;t=')


def test_the_python_buyer_buys_uses_and_tops_up(
    llm_seller: Seller, llm_app: AppProcess, devchain: Devchain
) -> None:
    buyer = devchain.new_account(eth=0)
    lines = _run(
        [sys.executable, str(SAMPLES / "llm_buyer.py")], llm_seller, llm_app, devchain, buyer
    )
    _check(lines)
    assert _paid(devchain, llm_seller, buyer) == [ONE_DOLLAR, ONE_DOLLAR]


def test_the_typescript_buyer_buys_uses_and_tops_up(
    llm_seller: Seller, llm_app: AppProcess, devchain: Devchain, tmp_path: Path
) -> None:
    buyer = devchain.new_account(eth=0)
    command = [str(NODE_BIN / "tsx"), str(SAMPLES / "llm_buyer.ts")]
    lines = _run(command, llm_seller, llm_app, devchain, buyer, tmp_path)
    _check(lines)
    assert _paid(devchain, llm_seller, buyer) == [ONE_DOLLAR, ONE_DOLLAR]
