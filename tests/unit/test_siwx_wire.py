"""The 402's sign-in-with-x declaration, made from cached parts, is the documents' compact JSON.

``SiwxDeclarer.member`` writes the member text per answer without building
and encoding ``info``, and ``iso_time`` formats from a cached second; both must
be exactly what the plain ``json.dumps`` and ``datetime`` code would write.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from x402srv.config.siwx import SiwxConfig
from x402srv.wire.siwx import SIGN_IN_WITH_X, SiwxDeclarer, iso_time, scope_tag

NOW = 1_764_300_000.123456


def reference_iso(timestamp: float) -> str:
    text = datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def test_iso_time_is_datetimes_text() -> None:
    rng = random.Random(25)
    edges = [0.0, 1.0, NOW, 1_764_300_000.0, 1_764_300_000.9995, 1_764_300_000.0005,
             1_764_300_000.9999995, 1_764_300_000.9999994, 253_402_300_799.5]  # fmt: skip
    samples = edges + [rng.uniform(0, 4_000_000_000) for _ in range(20_000)]
    samples += [round(rng.uniform(1e9, 2e9), rng.randint(0, 7)) for _ in range(20_000)]
    for timestamp in samples:
        assert iso_time(timestamp) == reference_iso(timestamp), timestamp


def test_iso_time_outside_the_cached_range_still_formats() -> None:
    assert iso_time(-1.5) == reference_iso(-1.5)
    assert iso_time(253_402_300_800.0 - 0.0001) == reference_iso(253_402_300_800.0 - 0.0001)


@pytest.mark.parametrize("statement", [None, 'Sign in: "quotes", \\ and ünïcode'])
@pytest.mark.parametrize(
    "uri", ["https://pay.example.com/x402/access", 'https://ü.example/a?b="c"']
)
def test_member_is_the_compact_json_of_the_declaration(statement: str | None, uri: str) -> None:
    declarer = SiwxDeclarer(
        SiwxConfig(statement=statement, expiration_seconds=600),
        "https://pay.example.com",
        "https://pay.example.com/x402/access",
    )
    networks = ("eip155:8453", "eip155:84532", "solana:x")
    for _ in range(2):  # built, then from the cached parts
        member = declarer.member(scope="access daily r", uri=uri, networks=networks, now=NOW)
        declared = json.loads("{" + member + "}")[SIGN_IN_WITH_X]
        expected = declarer.declaration(scope="access daily r", uri=uri, networks=networks, now=NOW)
        nonce = declared["info"]["nonce"]
        assert nonce[:16] == scope_tag("https://pay.example.com/x402/access", "access daily r")
        assert len(nonce) == 48 and nonce != expected["info"]["nonce"]
        expected["info"]["nonce"] = nonce
        compact = json.dumps({SIGN_IN_WITH_X: expected}, separators=(",", ":"))
        assert "{" + member + "}" == compact
