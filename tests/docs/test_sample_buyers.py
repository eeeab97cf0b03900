"""The docs' buyer samples, run as written against a real seller on anvil.

``buy.py`` and ``buy.ts`` are whole programs: they run as a reader runs them,
with the environment the docs tell them to export. The others are functions
the docs include; they run here with the official x402 client as the buyer.
Every purchase is checked on the chain, not on the seller's word.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

from eth_account.signers.local import LocalAccount

from tests.support.paths import REPO, SAMPLES
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import official_client

NODE_BIN = REPO / "node_modules" / ".bin"


def buyer_env(seller: Seller, devchain: Devchain, buyer: LocalAccount) -> dict[str, str]:
    """What the buyers page tells a reader to export for a local seller."""
    return {
        **os.environ,
        "ACCESS_URL": seller.access_url,
        "API_URL": f"{seller.server.url}/api/weather",
        "PAY_TO": seller.wallet,
        "NETWORK": devchain.network,
        "TOKEN_ADDRESS": devchain.token.address,
        "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
    }


def paid_by(devchain: Devchain, seller: Seller, buyer: LocalAccount) -> list[int]:
    return [
        log.value
        for log in devchain.transfer_logs(to=seller.wallet)
        if log.from_address.lower() == buyer.address.lower()
    ]


def test_the_python_buyer_program(docs_seller: Seller, devchain: Devchain) -> None:
    buyer = devchain.new_account(eth=0)
    result = subprocess.run(
        [sys.executable, str(SAMPLES / "buy.py")],
        env=buyer_env(docs_seller, devchain, buyer),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    grant, discovery, protected = result.stdout.splitlines()
    assert grant.startswith("grant: hourly 0x")
    assert discovery == "discovery-first: 200 hourly"
    assert protected.startswith("protected route: 200 {'path': '/api/weather', 'payer': '0x")
    assert paid_by(devchain, docs_seller, buyer) == [100_000, 100_000]  # two purchases, once each


def test_the_typescript_buyer_program(
    docs_seller: Seller, devchain: Devchain, tmp_path: Path
) -> None:
    checked = subprocess.run(
        [str(NODE_BIN / "tsc"), "-p", str(SAMPLES / "tsconfig.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout  # tsc --strict, as the docs promise
    buyer = devchain.new_account(eth=0)
    result = subprocess.run(
        [str(NODE_BIN / "tsx"), str(SAMPLES / "buy.ts")],
        # tsx keeps its cache and IPC pipes in <tmpdir>/tsx-<uid> and never removes them.
        env={**buyer_env(docs_seller, devchain, buyer), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith("grant: hourly 0x")
    assert "same grant again: true" in lines
    assert "the same header again, the same grant: true" in lines
    assert "protected route: 200 {\n  path: '/api/weather'," in result.stdout
    assert paid_by(devchain, docs_seller, buyer) == [100_000, 100_000]


async def test_the_gateway_buyer_pays_once(docs_seller: Seller, devchain: Devchain) -> None:
    two_forecasts = runpy.run_path(str(SAMPLES / "gateway_buyer.py"))["two_forecasts"]
    buyer = devchain.new_account(eth=0)
    first, later = await two_forecasts(official_client(buyer), docs_seller.server.url)
    assert first.status_code == later.status_code == 200
    assert first.json()["path"] == "/api/forecast?city=berlin"
    assert later.json() == {"path": "/api/forecast?city=paris", "payer": buyer.address}
    assert paid_by(devchain, docs_seller, buyer) == [100_000]


async def test_the_a2a_buyer(docs_seller: Seller, devchain: Devchain) -> None:
    buy_over_a2a = runpy.run_path(str(SAMPLES / "a2a_buyer.py"))["buy_over_a2a"]
    buyer = devchain.new_account(eth=0)
    grant = await buy_over_a2a(docs_seller.server.url, official_client(buyer))
    assert (grant["type"], grant["planId"], grant["tokenType"]) == (
        "AccessGrant",
        "hourly",
        "Bearer",
    )
    assert paid_by(devchain, docs_seller, buyer) == [100_000]


async def test_the_a2a_streaming_buyer_sees_each_step(
    docs_seller: Seller, devchain: Devchain
) -> None:
    buy_streaming = runpy.run_path(str(SAMPLES / "a2a_stream_buyer.py"))["buy_streaming"]
    buyer = devchain.new_account(eth=0)
    shown: list[str] = []
    grant = await buy_streaming(docs_seller.server.url, official_client(buyer), shown.append)
    assert (grant["type"], grant["planId"]) == ("AccessGrant", "hourly")
    assert shown == [
        "TASK_STATE_WORKING payment-submitted",
        "TASK_STATE_WORKING payment-verified",
        f"TASK_STATE_WORKING payment-verified {grant['txHash']}",
        "AccessGrant received",
        "TASK_STATE_COMPLETED payment-completed",
    ]
    assert paid_by(devchain, docs_seller, buyer) == [100_000]


def test_the_wire_transcript_commands(docs_seller: Seller) -> None:
    result = subprocess.run(
        ["bash", "-e", str(SAMPLES / "wire.sh")],
        env={**os.environ, "X402SRV": docs_seller.server.url},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("HTTP/1.1 402 Payment Required") == 2
    assert result.stdout.lower().count("payment-required: ") == 2
    assert '"requestId":"0b8f0c1e-1c57-4b5e-9a3a-7d1f1f3e2a10"' in result.stdout.replace(" ", "")
