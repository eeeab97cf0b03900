"""The console page's curl lines, run as written against a real seller with ``[admin]`` on.

The seller's config is the docs' ``admin.toml`` laid over a test seller (the
token from the environment, the console on a port of its own); a buyer pays
with the official x402 client, then ``docs/samples/admin_api.sh`` runs under
bash with ``$PAYER`` and ``$CHALLENGE`` set to that purchase.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Callable
from typing import Any

from eth_account.signers.local import LocalAccount

from tests.support.paths import SAMPLES
from tests.support.purchase import buy
from tests.support.seller import Seller
from x402srv.testing.servers import free_port

TOKEN = "docs-admin-token-" + "d" * 24


async def test_the_admin_api_lines(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    sample = tomllib.loads((SAMPLES / "admin.toml").read_text())
    port = free_port()
    sample["admin"]["port"] = port
    seller = start_seller("gas-wallet", env={"X402SRV_ADMIN_TOKEN": TOKEN}, **sample)
    grant = await buy(seller, buyer)
    result = subprocess.run(
        ["bash", "-eu", str(SAMPLES / "admin_api.sh")],
        env={
            **os.environ,
            "X402SRV_ADMIN_TOKEN": TOKEN,
            "X402SRV_ADMIN_API": f"http://127.0.0.1:{port}/admin/api",
            "PAYER": buyer.address,
            "CHALLENGE": grant["challengeId"],
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    overview, purchases, purchase, revoked, reconciler = _documents(result.stdout)
    assert overview["revenue"]["bucket"] == "hour"
    assert [p["challengeId"] for p in purchases["items"]] == [grant["challengeId"]]
    assert purchase["history"][-1]["state"] == "DELIVERED"
    assert revoked["status"] == "revoked" and revoked["revokedNow"] is True
    assert "lastPass" in reconciler


def _documents(output: str) -> list[dict[str, Any]]:
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(output):
        document, at = decoder.raw_decode(output, at)
        found.append(document)
        while at < len(output) and output[at].isspace():
            at += 1
    return found
