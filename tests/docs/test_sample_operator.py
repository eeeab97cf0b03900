"""The operator commands the docs show, run as written next to a real seller's ``seller.toml``.

The lines run through ``x402srv.cli.main.main`` in one process (``command_lines``),
which is what the ``x402srv`` command calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support.paths import REPO, SAMPLES
from tests.support.seller import Seller


def test_the_operator_commands(docs_seller: Seller) -> None:
    challenge = docs_seller.challenge("hourly")["challengeId"]  # one PENDING to show, then cancel
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.command_lines", str(SAMPLES / "operator.sh")],
        cwd=docs_seller.server.directory,  # the seller's seller.toml is here
        env={
            **os.environ,
            **docs_seller.server.env,  # the secrets the seller's config names
            "CHALLENGE": challenge,
            "PYTHONPATH": str(REPO),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr  # the audit found nothing amiss
    assert f"{challenge}  PENDING" in result.stdout  # challenges list
    [shown] = _documents(result.stdout)
    assert (shown["challenge_id"], shown["state"]) == (challenge, "PENDING")  # challenges show
    assert f"\ncancelled {challenge} (hourly): " in result.stdout  # challenges cancel
    assert "reconciled: " in result.stderr
    assert " unmatched; " in result.stderr  # audit's summary line
    assert "settledAt,planId,network,asset,amount,amountUsd" in result.stdout  # export-sales
    assert "settled payment" in result.stderr


def _documents(output: str) -> list[dict[str, object]]:
    """The JSON documents the lines print (``challenges show``'s), in order."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := output.find("\n{", at)) != -1:
        document, at = decoder.raw_decode(output, start + 1)
        found.append(document)
    return found
