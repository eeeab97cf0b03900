"""``verify_access_token_sync`` is the async check without the loop: same answers, same errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.gateway import AGENT_URL, mint_token
from tests.support.seller import JWT_SECRET
from x402srv.errors import ConfigError, InvalidToken, TokenExpired
from x402srv.tokens.verify import (
    HS256KeySource,
    SyncKeySource,
    TokenVerifier,
    VerifyingKey,
    verify_access_token,
    verify_access_token_sync,
)

SOURCE = HS256KeySource(JWT_SECRET)


async def outcome_async(token: str, **kwargs: Any) -> Any:
    try:
        return await verify_access_token(
            token, SOURCE, issuer=AGENT_URL, audience=AGENT_URL, **kwargs
        )
    except InvalidToken as err:
        return (type(err), err.detail)


def outcome_sync(token: str, **kwargs: Any) -> Any:
    try:
        return verify_access_token_sync(
            token, SOURCE, issuer=AGENT_URL, audience=AGENT_URL, **kwargs
        )
    except InvalidToken as err:
        return (type(err), err.detail)


async def test_same_outcomes_for_the_same_tokens() -> None:
    good = await mint_token("daily")
    expired = await mint_token(ttl=1, issued_ago=1.1)  # (expired 0.1 s ago)
    foreign = await mint_token(secret="someone-elses-secret-" + "z" * 32)
    cases = [good, expired, foreign, "x.y.z", "", good + "x", good.replace(".", "..", 1)]
    for token in cases:
        assert await outcome_async(token) == outcome_sync(token), token
    assert outcome_sync(good).plan_id == "daily"
    assert outcome_sync(expired)[0] is TokenExpired


async def test_verifier_verify_sync() -> None:
    verifier = TokenVerifier(SOURCE, issuer=AGENT_URL, audience=AGENT_URL)
    assert verifier.verify_sync(await mint_token()).plan_id == "hourly"
    assert isinstance(SOURCE, SyncKeySource)


class _AsyncOnly:
    """A key source with only the async lookup (e.g. a seller's own)."""

    algorithm = "HS256"

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        return None


def test_verify_sync_needs_a_sync_key_source() -> None:
    verifier = TokenVerifier(_AsyncOnly(), issuer=AGENT_URL, audience=AGENT_URL)
    with pytest.raises(ConfigError, match="key_for_sync"):
        verifier.verify_sync("x.y.z")
