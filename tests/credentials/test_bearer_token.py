"""``bearer_token``'s b64token check (RFC 6750 2.1), in-process: what passes and what is refused."""

from __future__ import annotations

import pytest

from x402srv.errors import InvalidToken
from x402srv.tokens.admission import bearer_token


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
