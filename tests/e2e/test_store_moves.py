"""A seller moves sqlite -> postgres -> redis -> sqlite with ``x402srv export``/``import``.

Everything an operator would run, for real: a seller sells on sqlite and
stops; ``x402srv export`` writes the dump; ``x402srv migrate`` and ``import``
load it into PostgreSQL, whose export goes into Redis, whose export goes into
a new sqlite file; the seller starts again on that file. Nothing may be lost
on the way: the last export equals the first, every buyer's replay answers the
grant it got before the move, a paid authorization stays claimed (its payment
sent for another challenge is refused), and a challenge left unpaid can still
be paid, once.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.seller import Seller
from x402srv.cli.main import main
from x402srv.devchain import Devchain
from x402srv.testing import toml
from x402srv.testing.buyers import encode_payment, signed_payment
from x402srv.wire.offers import rfc3339


@pytest.fixture
def operator(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    """``operator(config, *args, stdin=None) -> (exit code, stdout, stderr)`` of ``x402srv``.

    The command line in this process (``x402srv.cli.main.main``, what ``python -m x402srv``
    runs) rather than a subprocess each: ten commands cost a second, not half a minute.
    """

    def run(config: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        try:
            code = main([*args, "--config", str(config)])
        finally:  # main() installs its own log handler; pytest's come back
            root.handlers[:], root.level = handlers, level
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _ok(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 0, err
    return out


def _config(seller: Seller, name: str, store: dict[str, Any]) -> Path:
    """The seller's config with another ``[store]``, beside its own."""
    path = seller.server.directory / f"{name}.toml"
    path.write_text(toml.dumps({**seller.server.config, "store": store}))
    return path


def _items(dump: Path) -> list[str]:
    """The dump's item lines (header and end line aside), in one order."""
    lines = dump.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "x402srv-store-dump"
    assert json.loads(lines[-1])["kind"] == "end"
    return sorted(lines[1:-1])


def _pay(seller: Seller, body: dict[str, str], header: str) -> httpx.Response:
    return httpx.post(seller.access_url, json=body, headers={"PAYMENT-SIGNATURE": header})


def test_a_seller_moves_through_every_store_with_nothing_lost(
    start_seller: Callable[..., Seller],
    devchain: Devchain,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    operator: Callable[..., tuple[int, str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redis_url = request.getfixturevalue("redis_url")
    postgres = request.getfixturevalue("postgres_server")
    schema = request.getfixturevalue("postgres_schema")
    seller = start_seller("gas-wallet")
    bought = []
    for _ in range(3):
        buyer = devchain.new_account()
        payment = seller.pay_with(buyer, "hourly")
        header = payment.header
        body = {"planId": "hourly", "requestId": payment.request_id}
        grant = _pay(seller, body, header)
        assert grant.status_code == 200, grant.text
        bought.append((body, header, grant.json()))
    unpaid = seller.challenge("daily")
    seller.server.stop()
    for name, value in seller.server.env.items():  # the operator's shell has the secrets
        monkeypatch.setenv(name, value)

    first = tmp_path / "sqlite.jsonl"
    _ok(operator(seller.server.config_path, "export", "--output", str(first)))
    assert first.stat().st_mode & 0o777 == 0o600  # grants are bearer tokens
    postgres_toml = _config(
        seller,
        "postgres",
        {"backend": "postgres", "postgres": {"dsn": postgres.dsn(), "schema": schema}},
    )
    _ok(operator(postgres_toml, "migrate"))
    _ok(operator(postgres_toml, "import", "--input", str(first)))
    from_postgres = _ok(operator(postgres_toml, "export"))
    redis_toml = _config(
        seller, "redis", {"backend": "redis", "url": redis_url, "redis": {"key_prefix": "moved:"}}
    )
    _ok(operator(redis_toml, "import", stdin=from_postgres))
    last_toml = _config(seller, "last", {"backend": "sqlite", "path": "moved.db"})
    _ok(operator(last_toml, "import", stdin=_ok(operator(redis_toml, "export"))))
    last = tmp_path / "last.jsonl"
    _ok(operator(last_toml, "export", "--output", str(last)))
    assert _items(last) == _items(first)
    assert len(_items(first)) >= len(bought) + 1

    # Importing again is refused: the store is not empty any more.
    code, _, err = operator(last_toml, "import", "--input", str(first))
    assert code == 1
    assert "not empty" in err

    seller.server.config = {
        **seller.server.config,
        "store": {"backend": "sqlite", "path": "moved.db"},
    }
    seller.server.start()
    transfers = len(devchain.transfer_logs(to=seller.wallet))
    for body, header, grant in bought:  # each replay answers the grant bought before the move
        replay = _pay(seller, body, header)
        assert replay.status_code == 200, replay.text
        assert replay.json() == grant
    # A paid authorization stays claimed: sent for another challenge, it is refused.
    elsewhere = {"planId": "hourly", "requestId": seller.challenge("hourly")["requestId"]}
    refused = _pay(seller, elsewhere, bought[0][1])
    assert refused.status_code != 200
    # The challenge left unpaid is still open, and is paid once.
    buyer = devchain.new_account()
    header = encode_payment(signed_payment(buyer, devchain.token, unpaid["accepts"][0]))
    paid = _pay(seller, {"planId": "daily", "requestId": unpaid["requestId"]}, header)
    assert paid.status_code == 200, paid.text
    assert len(devchain.transfer_logs(to=seller.wallet)) == transfers + 1
    # Its record, history included, is the one the first store kept.
    challenge_id = bought[0][2]["challengeId"]
    shown = json.loads(_ok(operator(last_toml, "challenges", "show", challenge_id)))
    exported = next(
        json.loads(line)["record"]
        for line in _items(first)
        if json.loads(line).get("record", {}).get("challenge_id") == challenge_id
    )
    assert shown["state"] == exported["state"] == "DELIVERED"
    # (show prints RFC 3339 times; the dump keeps the stored epoch seconds)
    assert shown["history"] == [{**step, "at": rfc3339(step["at"])} for step in exported["history"]]
