"""``JWKSKeySource``: one cache for both lookups, bounded refresh, and what a failure means.

Key sets come from real HTTP servers: a real x402srv (EdDSA) for rotation, and
the test upstream's steerable ``/.well-known/jwks.json`` for the failure
cases (500s, garbage, oversize). Time is a fake monotonic clock, so the rate
bound and the TTL are tested without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from eth_account.signers.local import LocalAccount

from tests.support.apps import AppProcess
from tests.support.gateway import AGENT_URL, eddsa_credentials
from tests.support.purchase import buy
from tests.support.seller import Seller
from x402srv.default_plugins.jwt_issuer import JwtIssuer
from x402srv.errors import ConfigError, InvalidToken, KeySourceUnavailable
from x402srv.interfaces import GrantRequest
from x402srv.testing.servers import free_port
from x402srv.tokens.jwks import MAX_JWKS_BYTES, JWKSKeySource, parse_jwks
from x402srv.tokens.verify import (
    AccessClaims,
    ed25519_jwk,
    verify_access_token,
    verify_access_token_sync,
)


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Signer:
    key: Ed25519PrivateKey
    kid: str

    def jwk(self) -> dict[str, str]:
        return ed25519_jwk(self.key.public_key(), self.kid)

    async def token(self) -> str:
        issuer = JwtIssuer(
            self.key, issuer=AGENT_URL, audience=AGENT_URL, clock=time.time, kid=self.kid
        )
        request = GrantRequest("req", "chal", "hourly", "default", "0x" + "1" * 64, "0xab", 600)
        return (await issuer.issue(request)).token


def signer(kid: str) -> Signer:
    return Signer(Ed25519PrivateKey.generate(), kid)


class KeySet:
    """The upstream's steerable JWKS endpoint."""

    def __init__(self, upstream: AppProcess) -> None:
        self.upstream = upstream
        self.url = f"{upstream.url}/.well-known/jwks.json"

    def serve(self, *signers: Signer, status: int = 200, raw: bytes | None = None) -> None:
        document = raw if raw is not None else json.dumps({"keys": [s.jwk() for s in signers]})
        response = httpx.put(f"{self.upstream.url}/_control/jwks?status={status}", content=document)
        assert response.status_code == 200

    def fetches(self) -> int:
        return int(httpx.get(f"{self.upstream.url}/_control/jwks").json()["fetches"])


@pytest.fixture
def keyset(echo_upstream: AppProcess) -> KeySet:
    return KeySet(echo_upstream)


async def verify(token: str, source: JWKSKeySource) -> AccessClaims:
    return await verify_access_token(token, source, issuer=AGENT_URL, audience=AGENT_URL)


def verify_sync(token: str, source: JWKSKeySource) -> AccessClaims:
    return verify_access_token_sync(token, source, issuer=AGENT_URL, audience=AGENT_URL)


async def test_one_fetch_serves_both_lookups(keyset: KeySet) -> None:
    k1 = signer("k1")
    keyset.serve(k1)
    token = await k1.token()
    source = JWKSKeySource(keyset.url, clock=Clock())
    before = keyset.fetches()
    assert (await verify(token, source)).plan_id == "hourly"
    assert verify_sync(token, source).plan_id == "hourly"
    assert keyset.fetches() - before == 1
    assert source.kids == ["k1"]


async def test_sync_lookup_fetches_with_its_own_client(keyset: KeySet) -> None:
    k1 = signer("k1")
    keyset.serve(k1)
    source = JWKSKeySource(keyset.url, clock=Clock())
    before = keyset.fetches()
    assert verify_sync(await k1.token(), source).plan_id == "hourly"
    assert await verify(await k1.token(), source)
    assert keyset.fetches() - before == 1


async def test_unknown_kid_refreshes_at_most_once_per_interval(keyset: KeySet) -> None:
    """Security/availability: made-up kids cannot turn into one JWKS fetch per request."""
    k1, stranger = signer("k1"), signer("not-published")
    keyset.serve(k1)
    clock = Clock()
    source = JWKSKeySource(keyset.url, clock=clock, min_refresh_interval=30)
    await verify(await k1.token(), source)
    clock.now += 31
    before = keyset.fetches()
    forged = await stranger.token()
    for _ in range(20):
        with pytest.raises(InvalidToken, match="unknown key"):
            await verify(forged, source)
    assert keyset.fetches() - before == 1
    clock.now += 31
    with pytest.raises(InvalidToken):
        verify_sync(forged, source)
    assert keyset.fetches() - before == 2


async def test_overlapping_rotation_then_removal(keyset: KeySet) -> None:
    k1, k2 = signer("k1"), signer("k2")
    clock = Clock()
    source = JWKSKeySource(keyset.url, clock=clock, cache_ttl=300, min_refresh_interval=30)
    old, new = await k1.token(), await k2.token()
    keyset.serve(k1)
    await verify(old, source)
    keyset.serve(k1, k2)  # the issuer publishes the next key before signing with it
    clock.now += 31
    await verify(new, source)  # unknown kid: refreshed at once
    await verify(old, source)  # both verify during the overlap
    keyset.serve(k2)  # the old key is withdrawn ...
    await verify(old, source)  # ... still trusted until the cache is due
    clock.now += 301
    with pytest.raises(InvalidToken, match="unknown key"):
        await verify(old, source)
    await verify(new, source)


async def test_endpoint_down_keeps_known_keys_and_refuses_new_ones_as_503(
    keyset: KeySet,
) -> None:
    k1, k2 = signer("k1"), signer("k2")
    keyset.serve(k1)
    clock = Clock()
    source = JWKSKeySource(keyset.url, clock=clock, cache_ttl=60, min_refresh_interval=30)
    await verify(await k1.token(), source)
    keyset.serve(k1, status=500)
    clock.now += 61
    before = keyset.fetches()
    await verify(await k1.token(), source)  # stale-if-error: known keys keep verifying
    with pytest.raises(KeySourceUnavailable) as unavailable:
        await verify(await k2.token(), source)  # could only have come from the failed fetch
    assert unavailable.value.status == 503
    assert keyset.fetches() - before == 1
    keyset.serve(k1, k2)
    clock.now += 31
    await verify(await k2.token(), source)  # recovered at the next allowed fetch


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_unreachable_endpoint_without_keys_is_unavailable(sync: bool) -> None:
    source = JWKSKeySource(f"http://127.0.0.1:{free_port()}/jwks.json", timeout=2)
    token = await signer("k1").token()
    with pytest.raises(KeySourceUnavailable):
        verify_sync(token, source) if sync else await verify(token, source)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b"<html>not json</html>", id="not-json"),
        pytest.param(b'{"keys": 1}', id="keys-not-a-list"),
        pytest.param(b'{"keys": [{"kty": "RSA", "kid": "r", "n": "AQAB", "e": "AQAB"}]}', id="rsa"),
        pytest.param(b'{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "!!"}]}', id="no-kid"),
        pytest.param(b'{"keys": []' + b" " * MAX_JWKS_BYTES + b"}", id="oversize"),
    ],
)
async def test_unusable_key_sets_are_unavailable_not_invalid(keyset: KeySet, raw: bytes) -> None:
    keyset.serve(raw=raw)
    source = JWKSKeySource(keyset.url, clock=Clock())
    with pytest.raises(KeySourceUnavailable):
        await verify(await signer("k1").token(), source)


async def test_concurrent_misses_share_one_fetch(keyset: KeySet) -> None:
    k1 = signer("k1")
    keyset.serve(k1)
    source = JWKSKeySource(keyset.url, clock=Clock())
    token = await k1.token()
    before = keyset.fetches()
    results = await asyncio.gather(*(verify(token, source) for _ in range(20)))
    assert len(results) == 20
    assert keyset.fetches() - before == 1


def test_keys_are_only_fetched_over_https_unless_loopback() -> None:
    with pytest.raises(ConfigError, match="https"):
        JWKSKeySource("http://keys.example.com/jwks.json")
    JWKSKeySource("http://keys.example.com/jwks.json", allow_http=True)
    JWKSKeySource("https://keys.example.com/jwks.json")
    JWKSKeySource("http://localhost:8402/.well-known/jwks.json")
    with pytest.raises(ConfigError):
        JWKSKeySource("file:///etc/passwd")


def test_repr_hides_userinfo() -> None:
    source = JWKSKeySource("https://user:hunter2@keys.example.com/jwks.json")
    assert "hunter2" not in repr(source)


def test_parse_jwks_skips_what_it_cannot_use() -> None:
    good = signer("good")
    document = {
        "keys": [
            {"kty": "RSA", "kid": "rsa", "n": "x", "e": "AQAB"},
            {**good.jwk(), "kid": ""},
            {**good.jwk(), "use": "enc", "kid": "enc"},
            {**good.jwk(), "alg": "ES256", "kid": "es"},
            good.jwk(),
        ]
    }
    assert list(parse_jwks(json.dumps(document).encode())) == ["good"]


def test_parse_jwks_bounds_nesting_before_parsing() -> None:
    # A key endpoint under someone else's control must not reach the C parser with
    # deep nesting (``protocol.bounded_json``): refused like any other bad key set.
    with pytest.raises(ValueError, match="arrays/objects"):
        parse_jwks(b"[" * 300 + b"]" * 300)


async def test_rotation_against_a_restarted_x402srv(
    start_seller: Callable[..., Seller], buyer: LocalAccount
) -> None:
    """A real x402srv restarted with a new key: the new kid is fetched, the old one dropped."""
    seller = start_seller("gas-wallet", credentials=eddsa_credentials("rot-1"))
    fetched: list[str] = []

    async def count(request: httpx.Request) -> None:
        fetched.append(str(request.url))

    clock = Clock()
    async with httpx.AsyncClient(event_hooks={"request": [count]}) as client:
        source = JWKSKeySource(
            f"{seller.server.url}/.well-known/jwks.json", client=client, clock=clock
        )
        first = (await buy(seller, buyer))["accessToken"]
        assert (await verify(first, source)).plan_id == "hourly"
        assert source.kids == ["rot-1"]

        seller.server.config = {**seller.server.config, "credentials": eddsa_credentials("rot-2")}
        seller.server.stop()
        seller.server.start()
        second = (await buy(seller, buyer))["accessToken"]
        await verify(first, source)  # cached key: still verifies until a refresh
        clock.now += 31
        assert (await verify(second, source)).plan_id == "hourly"
        assert source.kids == ["rot-2"]
        with pytest.raises(InvalidToken, match="unknown key"):
            await verify(first, source)  # x402srv no longer publishes rot-1
    assert len(fetched) == 2
