"""The bearer token's form (RFC 6750 2.1 b64token), in-process: what passes and what is refused."""

from __future__ import annotations

import pytest

from tests.support.credentials import AGENT_URL, SECRET, FrozenClock, access_claims, forge
from x402srv.errors import InvalidToken
from x402srv.tokens import admission
from x402srv.tokens.admission import bearer_token
from x402srv.tokens.verify import AccessClaims, HS256KeySource, TokenVerifier, hs256_key_id


@pytest.mark.parametrize(
    "token", ["a", "a=", "a==", "AZaz09-._~+/", "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", "x" * 600]
)
def test_b64token_is_accepted(token: str) -> None:
    assert bearer_token([f"Bearer {token}"]) == token
    assert bearer_token([f"bearer  {token} "]) == token


@pytest.mark.parametrize(
    "token", ["", "=", "==", "=a", "a=b", "a b", "a\tb", "a,b", "a%2F", "é", "a\x00", "a\nb"]
)
def test_non_b64token_is_refused(token: str) -> None:
    with pytest.raises(InvalidToken, match=r"malformed|required|scheme"):
        bearer_token([f"Bearer {token}"])


def _signed_token(clock: FrozenClock) -> str:
    return forge(
        {"alg": "HS256", "typ": "at+jwt", "kid": hs256_key_id(SECRET.encode())},
        access_claims(clock.now),
        hmac_key=SECRET.encode(),
    )


@pytest.mark.parametrize("text", ["=a", "a=b", "a b", "a\tb", "a,b", "a%2F", "é", "a\x00", "a\nb"])
async def test_admit_refuses_what_bearer_token_refuses(text: str) -> None:
    """``admit`` leaves the form to the verifier; nothing ``bearer_token`` refuses gets through.

    Not even next to a token the verifier has just accepted (and cached).
    """
    clock = FrozenClock()
    verifier = TokenVerifier(
        HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=clock
    )
    token = _signed_token(clock)
    assert isinstance(await admission.admit(verifier, [f"Bearer {token}"]), AccessClaims)
    for candidate in (text, token + text, text + token):
        with pytest.raises(InvalidToken):
            bearer_token([f"Bearer {candidate}"])
        assert isinstance(await admission.admit(verifier, [f"Bearer {candidate}"]), InvalidToken)
        assert isinstance(admission.admit_sync(verifier, [f"Bearer {candidate}"]), InvalidToken)


@pytest.mark.parametrize("stray", ["~", "+", "/", "~~~~", "++++", "////"])
async def test_admit_refuses_a_cached_token_spelled_otherwise(stray: str) -> None:
    """b64token characters outside base64url: ``bearer_token`` lets them by, the verifier not."""
    clock = FrozenClock()
    verifier = TokenVerifier(
        HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=clock
    )
    token = _signed_token(clock)
    assert isinstance(await admission.admit(verifier, [f"Bearer {token}"]), AccessClaims)
    for candidate in (token[:-4] + stray + token[-4:], token + stray, stray + token):
        assert bearer_token([f"Bearer {candidate}"]) == candidate
        assert isinstance(await admission.admit(verifier, [f"Bearer {candidate}"]), InvalidToken)
        assert isinstance(admission.admit_sync(verifier, [f"Bearer {candidate}"]), InvalidToken)
