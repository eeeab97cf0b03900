"""The sign-in-with-x buyer samples (docs/sign-in-with-x.md), run as written.

A wallet buys ``hourly`` with the official client in this process; then each
sample runs as a fresh process holding nothing but the wallet's key, and gets
the same grant back without paying: ``siwx_buyer.py`` over /x402/access and a
gateway route, ``siwx_buyer.ts`` over /x402/access. Two instances behind one
URL, the races and contract wallets are in tests/e2e/test_siwx.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO, SAMPLES
from tests.support.seller import Seller
from x402srv.devchain import Devchain
from x402srv.testing.buyers import paying_client

NODE_BIN = REPO / "node_modules" / ".bin"


async def test_the_siwx_buyers_get_the_grant_again_from_a_fresh_process(
    docs_seller: Seller, devchain: Devchain, tmp_path: Path
) -> None:
    buyer = devchain.new_account(eth=0)
    http, _ = paying_client(buyer)
    async with http:
        bought = await http.post(docs_seller.access_url, json={"planId": "hourly"})
    assert bought.status_code == 200, bought.text
    grant = bought.json()
    route = f"{docs_seller.server.url}/api/forecast"
    env = {
        **os.environ,
        "BUYER_KEY": "0x" + bytes(buyer.key).hex(),
        "ACCESS_URL": docs_seller.access_url,
        "PAID_URL": route,
        "PAY_TO": docs_seller.wallet,
        "TMPDIR": str(tmp_path),  # tsx keeps its cache there and never removes it
    }
    shown = subprocess.run(
        [sys.executable, str(SAMPLES / "siwx_buyer.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    out = shown.stdout
    print(out)
    assert "sent SIGN-IN-WITH-X:" in out and "(paid)" not in out
    line = next(x for x in out.splitlines() if x.startswith("/x402/access:"))
    assert line.split(" ", 2)[1] == "200"
    assert json.loads(line.split(" ", 2)[2]) == grant  # the same grant, as a repeat delivery
    gateway = next(x for x in out.splitlines() if x.startswith(route))
    assert gateway.split()[1:] == ["200", grant["accessToken"]]
    typescript = subprocess.run(
        [str(NODE_BIN / "tsx"), str(SAMPLES / "siwx_buyer.ts")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert typescript.returncode == 0, typescript.stdout + typescript.stderr
    assert typescript.stdout.split() == ["/x402/access:", "200", "hourly", grant["accessToken"]]
    paid = [
        log.value
        for log in devchain.transfer_logs(to=docs_seller.wallet)
        if log.from_address.lower() == buyer.address.lower()
    ]
    assert paid == [100_000]  # the purchase, and nothing since
