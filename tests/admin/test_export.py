"""``x402srv export-sales`` and the console's export: one row per settled payment.

Purchases are made by the official x402 client on a real seller; the command
runs as a seller would run it (next to the running server, on its store).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

from eth_account.signers.local import LocalAccount

from tests.support.console import Console, buy
from tests.support.problems import assert_problem
from x402srv.export import FIELDS


def export_sales(console: Console, *args: str) -> subprocess.CompletedProcess[str]:
    server = console.seller.server
    return subprocess.run(
        [sys.executable, "-m", "x402srv", "export-sales", "--config", "seller.toml", *args],
        cwd=server.directory,
        env={**os.environ, **server.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_export_sales_as_csv_and_jsonl(console: Console, buyer: LocalAccount) -> None:
    start = time.time() - 1
    hourly = await buy(console.seller, buyer, "hourly")
    daily = await buy(console.seller, buyer, "daily")
    assert console.post(f"/grants/{daily['challengeId']}/revoke").status_code == 200
    mine = {hourly["challengeId"], daily["challengeId"]}

    result = export_sales(console, "--from", str(start), "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert "settled payment(s)" in result.stderr
    reader = csv.DictReader(io.StringIO(result.stdout))
    assert tuple(reader.fieldnames or ()) == FIELDS
    rows = {row["challengeId"]: row for row in reader if row["challengeId"] in mine}
    assert rows[hourly["challengeId"]] == {
        "settledAt": rows[hourly["challengeId"]]["settledAt"],
        "planId": "hourly",
        "network": hourly["network"],
        "asset": console.seller.chain.token.address,
        "amount": "100000",
        "amountUsd": "0.10",
        "payer": buyer.address,
        "txHash": hourly["txHash"],
        "requestId": hourly["requestId"],
        "challengeId": hourly["challengeId"],
        "status": "delivered",
    }
    assert rows[daily["challengeId"]]["amountUsd"] == "1.50"
    assert rows[daily["challengeId"]]["status"] == "revoked"
    assert rows[hourly["challengeId"]]["settledAt"].endswith("Z")
    assert rows[hourly["challengeId"]]["settledAt"] <= rows[daily["challengeId"]]["settledAt"]

    lines = export_sales(console, "--from", str(start), "--format", "jsonl").stdout.splitlines()
    documents = [json.loads(line) for line in lines]
    assert {d["challengeId"]: d for d in documents if d["challengeId"] in mine} == rows
    settled_times = [d["settledAt"] for d in documents]
    assert settled_times == sorted(settled_times)

    before = export_sales(console, "--from", "2020-01-01", "--to", str(start))
    assert before.returncode == 0
    assert before.stdout.splitlines()[0] == ",".join(FIELDS)
    assert not any(challenge_id in before.stdout for challenge_id in mine)  # settled after
    assert export_sales(
        console, "--from", "2020-01-01", "--to", "2020-01-02"
    ).stdout.splitlines() == [",".join(FIELDS)]

    answer = console.get("/export", **{"from": str(start), "format": "csv"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/csv")
    assert answer.headers["content-disposition"].startswith('attachment; filename="sales_')
    api_rows = [r for r in csv.DictReader(io.StringIO(answer.text)) if r["challengeId"] in mine]
    assert {r["challengeId"]: r for r in api_rows} == rows


def test_bad_exports(console: Console) -> None:
    bad = export_sales(console, "--from", "last tuesday")
    assert bad.returncode == 2 and "--from" in bad.stderr
    assert_problem(console.get("/export"), 400, "INVALID_REQUEST")
    assert_problem(
        console.get("/export", **{"from": "2026-01-01", "format": "xls"}), 400, "INVALID_REQUEST"
    )
    assert_problem(
        console.get("/export", **{"from": "2026-01-02", "to": "2026-01-01"}), 400, "INVALID_REQUEST"
    )


async def test_grants_revoke_from_the_command_line(console: Console, buyer: LocalAccount) -> None:
    grant = await buy(console.seller, buyer)
    server = console.seller.server
    revoked_before = console.ok("/funnel")["revoked"]

    def revoke() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "x402srv",
                "grants",
                "revoke",
                grant["challengeId"],
                "--config",
                "seller.toml",
                "--reason",
                "fraud",
            ],
            cwd=server.directory,
            env={**os.environ, **server.env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    first = revoke()
    assert first.returncode == 0, first.stderr
    assert first.stderr.strip().endswith("revoked")
    record = json.loads(first.stdout)
    assert record["revoked_at"] is not None
    assert record["history"][-1]["reason"] == "revoked: by operator: fraud"
    assert grant["accessToken"] not in first.stdout
    second = revoke()
    assert second.returncode == 0 and second.stderr.strip().endswith("already revoked")
    assert console.ok(f"/purchases/{grant['challengeId']}")["revokedAt"] is not None
    # the command's own count reached the store before it exited (once: the second did nothing)
    assert console.ok("/funnel")["revoked"] == revoked_before + 1
