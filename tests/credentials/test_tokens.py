"""Token verification without a web framework: round trips, key sources, time, fuzzing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.credentials import (
    AGENT_URL,
    FROZEN_NOW,
    SECRET,
    TTL,
    FrozenClock,
    access_claims,
    build_issuer,
    forge,
    grant_request,
    make_config,
)
from x402srv.errors import ConfigError, InvalidToken, TokenExpired, TokenRevoked
from x402srv.tokens.verify import (
    AccessClaims,
    Ed25519KeySource,
    HS256KeySource,
    KeySource,
    TokenVerifier,
    VerifyingKey,
    hs256_key_id,
    verify_access_token,
)

HS_KID = hs256_key_id(SECRET.encode())


def hs_token(**overrides: Any) -> str:
    return forge(
        {"alg": "HS256", "typ": "at+jwt", "kid": HS_KID},
        access_claims(**overrides),
        hmac_key=SECRET.encode(),
    )


def hs_verifier(clock: FrozenClock, **kwargs: Any) -> TokenVerifier:
    return TokenVerifier(
        HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=clock, **kwargs
    )


@pytest.mark.parametrize("algorithm", ["HS256", "EdDSA"])
async def test_round_trip_from_the_same_config(
    clock: FrozenClock, ed25519_pem: str, algorithm: str
) -> None:
    config = (
        make_config(secret=SECRET)
        if algorithm == "HS256"
        else make_config(algorithm="EdDSA", private_key=ed25519_pem)
    )
    credential = await build_issuer("jwt", config, clock).issue(grant_request())
    verifier = TokenVerifier.from_config(config, clock=clock)
    assert verifier.algorithm == algorithm

    claims = await verifier.verify(credential.token)

    assert claims == AccessClaims(
        request_id="6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11",
        challenge_id="ch_7Yq2n4Kp",
        resource_id="weather:berlin",
        plan_id="hourly",
        tx_hash="0x" + "ab" * 32,
        payer="0x" + "22" * 20,
        issued_at=FROZEN_NOW,
        expires_at=FROZEN_NOW + TTL,
        issuer=AGENT_URL,
        audience=AGENT_URL,
        claims=claims.claims,
    )
    assert claims.claims["planId"] == "hourly"


async def test_round_trip_with_configured_audience_and_kid(clock: FrozenClock) -> None:
    config = make_config(secret=SECRET, audience="https://data.example.com", kid="2026-01")
    credential = await build_issuer("jwt", config, clock).issue(grant_request())
    claims = await TokenVerifier.from_config(config, clock=clock).verify(credential.token)
    assert claims.audience == "https://data.example.com"


async def test_claims_mapping_is_read_only(clock: FrozenClock) -> None:
    claims = await hs_verifier(clock).verify(hs_token())
    with pytest.raises(TypeError):
        claims.claims["planId"] = "yearly"  # type: ignore[index]  # mypy refuses it too: the point


async def test_payer_claim_is_optional(clock: FrozenClock) -> None:
    claims = await hs_verifier(clock).verify(hs_token(payer=None))
    assert claims.payer is None


async def test_verify_access_token_function_with_explicit_now() -> None:
    token = hs_token()
    source = HS256KeySource(SECRET)
    claims = await verify_access_token(
        token, source, issuer=AGENT_URL, audience=AGENT_URL, now=FROZEN_NOW + 10
    )
    assert claims.challenge_id == "ch_7Yq2n4Kp"
    with pytest.raises(TokenExpired):
        await verify_access_token(
            token, source, issuer=AGENT_URL, audience=AGENT_URL, now=FROZEN_NOW + TTL
        )


async def test_expiry_boundary_and_leeway(clock: FrozenClock) -> None:
    token = hs_token()
    clock.advance(TTL - 1)
    await hs_verifier(clock).verify(token)
    clock.advance(1)  # exp == now: expired (RFC 7519 4.1.4 "on or after")
    with pytest.raises(TokenExpired) as caught:
        await hs_verifier(clock).verify(token)
    assert caught.value.code == "TOKEN_EXPIRED"
    assert caught.value.status == 401
    await hs_verifier(clock, leeway=5).verify(token)


async def test_token_from_the_future_is_refused(clock: FrozenClock) -> None:
    with pytest.raises(InvalidToken, match="future"):
        await hs_verifier(clock).verify(hs_token(iat=FROZEN_NOW + 60))
    await hs_verifier(clock, leeway=60).verify(hs_token(iat=FROZEN_NOW + 60))


async def test_not_before_is_honoured(clock: FrozenClock) -> None:
    with pytest.raises(InvalidToken, match="not valid yet"):
        await hs_verifier(clock).verify(hs_token(nbf=FROZEN_NOW + 60))
    clock.advance(60)
    await hs_verifier(clock).verify(hs_token(nbf=FROZEN_NOW + 60))


async def test_rfc9068_media_type_spelling_is_accepted(clock: FrozenClock) -> None:
    token = forge(
        {"alg": "HS256", "typ": "application/at+jwt", "kid": HS_KID},
        access_claims(),
        hmac_key=SECRET.encode(),
    )
    await hs_verifier(clock).verify(token)


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"resourceId": None}, "'resourceId'"),
        ({"planId": 7}, "'planId'"),
        ({"txHash": ""}, "'txHash'"),
        ({"payer": 1}, "'payer'"),
        ({"sub": ""}, "'sub'"),
        ({"iat": None}, "'iat'"),
        ({"iat": "yesterday"}, "'iat'"),
        ({"exp": True}, "'exp'"),
        ({"exp": 10**30}, "'exp'"),
        ({"aud": ["https://other.example.com"]}, "audience"),
    ],
)
async def test_claims_of_the_wrong_shape_are_invalid(
    clock: FrozenClock, overrides: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(InvalidToken, match=complaint) as caught:
        await hs_verifier(clock).verify(hs_token(**overrides))
    assert type(caught.value) is InvalidToken


async def test_audience_list_containing_ours_is_accepted(clock: FrozenClock) -> None:
    claims = await hs_verifier(clock).verify(hs_token(aud=["https://other.example", AGENT_URL]))
    assert claims.audience == AGENT_URL


def test_ed25519_source_from_every_key_form(
    ed25519_key: Ed25519PrivateKey, ed25519_pem: str, ed25519_public_pem: str
) -> None:
    forms: list[Any] = [ed25519_key, ed25519_key.public_key(), ed25519_pem, ed25519_public_pem]
    kids = {Ed25519KeySource(form).kid for form in forms}
    assert len(kids) == 1
    assert isinstance(Ed25519KeySource(ed25519_public_pem), KeySource)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: HS256KeySource("x" * 31), id="short-secret"),
        pytest.param(lambda: HS256KeySource(b""), id="empty-secret"),
        pytest.param(lambda: Ed25519KeySource("-----BEGIN PUBLIC KEY-----\nAA\n"), id="bad-pem"),
        pytest.param(lambda: Ed25519KeySource(b"\x00" * 32), id="raw-bytes"),
        pytest.param(
            lambda: TokenVerifier(HS256KeySource(SECRET), issuer="", audience=AGENT_URL),
            id="no-issuer",
        ),
        pytest.param(
            lambda: TokenVerifier(
                HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, algorithms=["EdDSA"]
            ),
            id="algorithms-exclude-the-key",
        ),
        pytest.param(
            lambda: TokenVerifier.from_config(make_config()), id="from-config-without-secret"
        ),
        pytest.param(
            lambda: TokenVerifier.from_config(make_config(issuer="callback", callback="m:f")),
            id="from-config-for-callback-issuer",
        ),
    ],
)
def test_unusable_verifier_fails_at_construction(build: Any) -> None:
    with pytest.raises(ConfigError):
        build()


def test_from_config_names_the_key_path() -> None:
    with pytest.raises(ConfigError) as caught:
        TokenVerifier.from_config(make_config(secret="too short"))
    assert caught.value.path == "credentials.secret"
    assert "too short" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        TokenVerifier.from_config(make_config(algorithm="EdDSA"))
    assert caught.value.path == "credentials.private_key"


async def test_verify_access_token_refuses_algorithms_that_exclude_the_key() -> None:
    """A programming error, raised whatever the token: not a 401 for the client."""
    with pytest.raises(ConfigError):
        await verify_access_token(
            "anything",
            HS256KeySource(SECRET),
            issuer=AGENT_URL,
            audience=AGENT_URL,
            algorithms=["EdDSA"],
        )


def test_key_sources_and_verifier_repr_show_no_secret(clock: FrozenClock) -> None:
    assert SECRET not in repr(hs_verifier(clock))


# ---------------------------------------------------------------- fuzzing

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
_claim_names = st.sampled_from(
    ["iss", "sub", "aud", "iat", "exp", "nbf", "jti", "resourceId", "planId", "txHash", "payer"]
)


def _verify_only_raises_token_errors(token: str) -> None:
    verifier = hs_verifier(FrozenClock())
    try:
        claims = asyncio.run(verifier.verify(token))
    except InvalidToken:  # TokenExpired included
        return
    assert isinstance(claims, AccessClaims)


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(max_size=300))
def test_arbitrary_strings_only_ever_give_invalid_token(token: str) -> None:
    _verify_only_raises_token_errors(token)


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    header=st.dictionaries(st.sampled_from(["alg", "typ", "kid", "crit", "b64"]), _json),
    changes=st.dictionaries(_claim_names, _json, max_size=4),
)
def test_correctly_signed_garbage_only_ever_gives_invalid_token(
    header: dict[str, Any], changes: dict[str, Any]
) -> None:
    """Signed with the right key, so every claim and header check is reached."""
    full_header = {"alg": "HS256", "typ": "at+jwt", "kid": HS_KID, **header}
    token = forge(full_header, access_claims(**changes), hmac_key=SECRET.encode())
    _verify_only_raises_token_errors(token)


class _SyncRevocations:
    """A revocation source with only the blocking lookup (a Flask app's, say)."""

    def __init__(self, *revoked: str) -> None:
        self.revoked = set(revoked)

    def is_revoked_sync(self, challenge_id: str) -> bool:
        return challenge_id in self.revoked


class _AsyncRevocations:
    def __init__(self, *revoked: str) -> None:
        self.revoked = set(revoked)

    async def is_revoked(self, challenge_id: str) -> bool:
        return challenge_id in self.revoked


class _AsyncKeys:
    """A key source with only the async lookup."""

    algorithm = "HS256"

    async def key_for(self, kid: str | None) -> VerifyingKey | None:
        return SECRET.encode() if kid == HS_KID else None


async def test_a_source_without_the_lookup_asked_for_fails_every_call(clock: FrozenClock) -> None:
    """The verifier checks a source's kind once per source, not once and never again.

    A source that lacks the lookup is a programming error on every call, and
    one swapped in later is checked in turn.
    """
    token = hs_token()
    jti = access_claims()["jti"]
    verifier = hs_verifier(clock, revocations=_SyncRevocations())
    for _ in range(2):
        with pytest.raises(ConfigError, match="no async lookup"):
            await verifier.verify(token)
        assert verifier.verify_sync(token).challenge_id == jti
    verifier.revocations = _SyncRevocations(jti)
    with pytest.raises(TokenRevoked):
        verifier.verify_sync(token)
    verifier.revocations = _AsyncRevocations(jti)
    for _ in range(2):
        with pytest.raises(TokenRevoked):
            await verifier.verify(token)
        with pytest.raises(ConfigError, match="no blocking lookup"):
            verifier.verify_sync(token)
    async_keys = TokenVerifier(_AsyncKeys(), issuer=AGENT_URL, audience=AGENT_URL, clock=clock)
    assert (await async_keys.verify(token)).challenge_id == jti
    for _ in range(2):
        with pytest.raises(ConfigError, match="no blocking lookup"):
            async_keys.verify_sync(token)
