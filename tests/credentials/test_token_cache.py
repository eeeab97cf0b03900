"""The verifier's cache of tokens it already accepted (``x402srv.tokens.cache``).

A cached token skips decoding and the signature check, so what matters is that
nothing else changes: only the exact token text hits, expiry is still checked
on every call, failures are never cached, entries age out and the map is bounded.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.credentials import (
    AGENT_URL,
    SECRET,
    TTL,
    FrozenClock,
    access_claims,
    forge,
)
from x402srv.errors import InvalidToken, TokenExpired
from x402srv.tokens import verify as tokens_module
from x402srv.tokens.cache import DEFAULT_TTL_SECONDS, VerifiedTokens
from x402srv.tokens.verify import AccessClaims, HS256KeySource, TokenVerifier, hs256_key_id

HS_KID = hs256_key_id(SECRET.encode())


def _token(clock: FrozenClock, **claims: Any) -> str:
    header = {"alg": "HS256", "typ": "at+jwt", "kid": HS_KID}
    return forge(header, access_claims(clock.now, **claims), hmac_key=SECRET.encode())


def _verifier(clock: FrozenClock) -> TokenVerifier:
    return TokenVerifier(HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=clock)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every token that went through the full decode."""
    seen: list[str] = []
    real = tokens_module._decode

    def counting(token: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(token)
        return real(token, *args, **kwargs)

    monkeypatch.setattr(tokens_module, "_decode", counting)
    return seen


async def test_a_verified_token_is_not_decoded_again(decodes: list[str]) -> None:
    clock = FrozenClock()
    verifier, token = _verifier(clock), _token(clock)
    first = await verifier.verify(token)
    assert await verifier.verify(token) == first
    assert verifier.verify_sync(token) == first
    assert decodes == [token]


async def test_expiry_is_checked_on_every_hit(decodes: list[str]) -> None:
    clock = FrozenClock()
    verifier, token = _verifier(clock), _token(clock, exp=int(clock.now) + 30)
    await verifier.verify(token)
    clock.advance(31)
    with pytest.raises(TokenExpired):
        await verifier.verify(token)
    with pytest.raises(TokenExpired):  # and it is not served from the cache afterwards
        await verifier.verify(token)
    assert len(decodes) == 2


async def test_only_the_exact_token_hits(decodes: list[str]) -> None:
    clock = FrozenClock()
    verifier, token = _verifier(clock), _token(clock)
    await verifier.verify(token)
    tampered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    with pytest.raises(InvalidToken):
        await verifier.verify(tampered)
    with pytest.raises(InvalidToken):  # failures are not remembered either way
        await verifier.verify(tampered)
    assert decodes == [token, tampered, tampered]


async def test_entries_age_out(decodes: list[str]) -> None:
    clock = FrozenClock()
    verifier, token = _verifier(clock), _token(clock)
    await verifier.verify(token)
    clock.advance(DEFAULT_TTL_SECONDS + 1)
    assert DEFAULT_TTL_SECONDS + 1 < TTL
    await verifier.verify(token)
    clock.now -= 3 * DEFAULT_TTL_SECONDS  # a clock that went back does not extend an entry
    with pytest.raises(InvalidToken):  # issued in the future now
        await verifier.verify(token)
    assert decodes == [token, token, token]


def test_the_cache_is_bounded() -> None:
    clock = FrozenClock()
    cache = VerifiedTokens(entries=2)
    claims = AccessClaims(
        request_id="r-1",
        challenge_id="c-1",
        resource_id="default",
        plan_id="hourly",
        tx_hash="0x" + "ab" * 32,
        payer=None,
        issued_at=clock.now,
        expires_at=clock.now + TTL,
        issuer=AGENT_URL,
        audience=AGENT_URL,
        claims={},
    )
    for name in ("a", "b", "c"):
        cache.put(name, claims, clock.now)
    assert cache.get("a", clock.now, 0) is None  # the oldest left first
    assert cache.get("b", clock.now, 0) is claims
    assert cache.get("c", clock.now, 0) is claims
