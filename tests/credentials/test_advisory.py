"""Security regressions of the token guard, one named test each (as pyjwt's test_advisory.py).

Every attack goes through a real Sanic app and both ways of guarding a route
(``@require_access`` and the ``access_guard`` middleware), and must end in a
401 problem document with ``WWW-Authenticate: Bearer error="invalid_token"``
that the handler never saw.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sanic import Sanic

from tests.support.credentials import (
    AGENT_URL,
    FROZEN_NOW,
    SECRET,
    TTL,
    FrozenClock,
    access_claims,
    assert_refused,
    bearer,
    forge,
    guarded_app,
)
from x402srv.errors import InvalidToken
from x402srv.tokens.verify import (
    Ed25519KeySource,
    HS256KeySource,
    TokenVerifier,
    hs256_key_id,
    verify_access_token,
)

HS_KID = hs256_key_id(SECRET.encode())


# The apps are shared by the module's tests (a fresh Sanic app costs more than the
# request); their clocks stay frozen at FROZEN_NOW.


@pytest.fixture(scope="module", params=["decorator", "middleware"])
def style(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def hs_app(style: str) -> Sanic[Any, Any]:
    """The seller expects HS256 tokens with the shared secret."""
    verifier = TokenVerifier(
        HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=FrozenClock()
    )
    return guarded_app(verifier, style)


@pytest.fixture(scope="module")
def ed_app(style: str, ed25519_key: Ed25519PrivateKey) -> Sanic[Any, Any]:
    """The seller expects EdDSA tokens; only the public key is configured."""
    source = Ed25519KeySource(ed25519_key.public_key())
    verifier = TokenVerifier(source, issuer=AGENT_URL, audience=AGENT_URL, clock=FrozenClock())
    return guarded_app(verifier, style)


def hs_token(header: dict[str, Any] | None = None, **claims: Any) -> str:
    return forge(
        {"alg": "HS256", "typ": "at+jwt", "kid": HS_KID, **(header or {})},
        access_claims(**claims),
        hmac_key=SECRET.encode(),
    )


async def get(app: Sanic[Any, Any], headers: dict[str, str] | None = None) -> Any:
    _, response = await app.asgi_client.get("/api/data", headers=headers or {})
    return response


async def test_valid_token_is_admitted(hs_app: Sanic[Any, Any]) -> None:
    """The control: the same app lets a good token through, so refusals below mean something."""
    response = await get(hs_app, bearer(hs_token()))
    assert response.status == 200
    assert response.json == {"handler": "data", "planId": "hourly"}


async def test_missing_authorization_header(hs_app: Sanic[Any, Any]) -> None:
    assert_refused(await get(hs_app))


@pytest.mark.parametrize(
    "authorization",
    ["Basic dXNlcjpwYXNz", "Token {token}", "{token}", "JWT {token}", "Bearer-{token}"],
)
async def test_wrong_authorization_scheme(hs_app: Sanic[Any, Any], authorization: str) -> None:
    value = authorization.format(token=hs_token())
    assert_refused(await get(hs_app, {"Authorization": value}))


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer",
        "Bearer ",
        "Bearer not-a-jwt",
        "Bearer a.b",
        "Bearer a.b.c",
        "Bearer a.b.c.d.e",
        "Bearer {token} extra",
        "Bearer {token}.",
        "Bearer " + "A" * 9000,
    ],
)
async def test_malformed_token(hs_app: Sanic[Any, Any], authorization: str) -> None:
    assert_refused(await get(hs_app, {"Authorization": authorization.format(token=hs_token())}))


def _spliced(token: str, stray: str) -> str:
    """``token`` with ``stray`` inserted into its signature (length kept a multiple of 4)."""
    head, _, signature = token.rpartition(".")
    return f"{head}.{signature[:8]}{stray}{signature[8:]}"


@pytest.mark.parametrize("stray", ["!!!!", "~~~~", "++++", "////", "%2F%2F", "===="])
async def test_stray_characters_in_a_signed_token(hs_app: Sanic[Any, Any], stray: str) -> None:
    """A good signature with characters outside base64url spliced in is not that signature.

    Older pyjwt releases skip such characters when decoding; the verifier
    refuses anything but the compact form itself, before any decoding, and
    so no spelling of a token other than the issued one is ever cached.
    """
    token = _spliced(hs_token(), stray)
    assert_refused(await get(hs_app, {"Authorization": f"Bearer {token}"}))
    verifier = TokenVerifier(
        HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, clock=FrozenClock()
    )
    for _ in range(2):  # refused again: nothing was cached
        with pytest.raises(InvalidToken, match="malformed"):
            await verifier.verify(token)
        with pytest.raises(InvalidToken, match="malformed"):
            verifier.verify_sync(token)
    with pytest.raises(InvalidToken, match="malformed"):
        await verify_access_token(
            token, HS256KeySource(SECRET), issuer=AGENT_URL, audience=AGENT_URL, now=FROZEN_NOW
        )


async def test_trailing_padding_on_the_signature_still_passes(hs_app: Sanic[Any, Any]) -> None:
    """As before the form check moved into the verifier: a b64token may end in "="."""
    padded = hs_token() + "="
    response = await get(hs_app, bearer(padded))
    assert response.status == 200


async def test_expired_token_is_token_expired(hs_app: Sanic[Any, Any]) -> None:
    token = hs_token(iat=FROZEN_NOW - TTL - 1, exp=FROZEN_NOW - 1)
    body = assert_refused(await get(hs_app, bearer(token)), code="TOKEN_EXPIRED")
    assert body["title"] == "Access token expired"


async def test_token_expiring_right_now_is_expired(hs_app: Sanic[Any, Any]) -> None:
    token = hs_token(iat=FROZEN_NOW - TTL, exp=FROZEN_NOW)
    assert_refused(await get(hs_app, bearer(token)), code="TOKEN_EXPIRED")


async def test_wrong_audience(hs_app: Sanic[Any, Any]) -> None:
    assert_refused(await get(hs_app, bearer(hs_token(aud="https://other-seller.example"))))


async def test_missing_audience(hs_app: Sanic[Any, Any]) -> None:
    assert_refused(await get(hs_app, bearer(hs_token(aud=None))))


async def test_wrong_issuer(hs_app: Sanic[Any, Any]) -> None:
    assert_refused(await get(hs_app, bearer(hs_token(iss="https://evil.example"))))


async def test_missing_issuer(hs_app: Sanic[Any, Any]) -> None:
    assert_refused(await get(hs_app, bearer(hs_token(iss=None))))


async def test_wrong_signature_other_secret(hs_app: Sanic[Any, Any]) -> None:
    token = forge(
        {"alg": "HS256", "typ": "at+jwt", "kid": HS_KID},
        access_claims(),
        hmac_key=b"another-secret-that-is-long-enough-32b",
    )
    assert_refused(await get(hs_app, bearer(token)))


async def test_wrong_signature_other_ed25519_key(
    ed_app: Sanic[Any, Any], ed25519_key: Ed25519PrivateKey
) -> None:
    """Signed by an attacker's key but claiming the seller's kid."""
    seller_kid = Ed25519KeySource(ed25519_key.public_key()).kid
    token = forge(
        {"alg": "EdDSA", "typ": "at+jwt", "kid": seller_kid},
        access_claims(),
        ed25519_key=Ed25519PrivateKey.generate(),
    )
    assert_refused(await get(ed_app, bearer(token)))


async def test_tampered_claims_break_the_signature(hs_app: Sanic[Any, Any]) -> None:
    header, _, signature = hs_token(planId="hourly").split(".")
    tampered = forge({}, access_claims(planId="yearly", exp=FROZEN_NOW + 10 * TTL))
    payload = tampered.split(".")[1]
    assert_refused(await get(hs_app, bearer(f"{header}.{payload}.{signature}")))


async def test_stripped_signature(hs_app: Sanic[Any, Any]) -> None:
    header, payload, _ = hs_token().split(".")
    assert_refused(await get(hs_app, bearer(f"{header}.{payload}.")))


async def test_missing_exp(hs_app: Sanic[Any, Any]) -> None:
    """A token without exp would never expire: refused, not treated as eternal."""
    assert_refused(await get(hs_app, bearer(hs_token(exp=None))))


@pytest.mark.parametrize("claim", ["sub", "jti"])
async def test_missing_sub_or_jti(hs_app: Sanic[Any, Any], claim: str) -> None:
    assert_refused(await get(hs_app, bearer(hs_token(**{claim: None}))))


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
async def test_alg_none(hs_app: Sanic[Any, Any], alg: str) -> None:
    token = forge({"alg": alg, "typ": "at+jwt", "kid": HS_KID}, access_claims())
    assert_refused(await get(hs_app, bearer(token)))


@pytest.mark.parametrize("alg", ["none", "HS256"])
async def test_alg_none_against_eddsa(
    ed_app: Sanic[Any, Any], alg: str, ed25519_key: Ed25519PrivateKey
) -> None:
    kid = Ed25519KeySource(ed25519_key.public_key()).kid
    token = forge({"alg": alg, "typ": "at+jwt", "kid": kid}, access_claims())
    assert_refused(await get(ed_app, bearer(token)))


@pytest.mark.parametrize("hmac_key_form", ["pem", "pem-stripped", "raw", "jwk-x"])
async def test_hs256_signed_with_the_eddsa_public_key(
    ed_app: Sanic[Any, Any], hmac_key_form: str, ed25519_key: Ed25519PrivateKey
) -> None:
    """CVE-2022-29217 shape: the attacker HMACs with the seller's public key as the secret."""
    public = ed25519_key.public_key()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    hmac_key = {
        "pem": pem,
        "pem-stripped": pem.strip(),
        "raw": raw,
        "jwk-x": base64.urlsafe_b64encode(raw).rstrip(b"="),
    }[hmac_key_form]
    kid = Ed25519KeySource(public).kid
    token = forge({"alg": "HS256", "typ": "at+jwt", "kid": kid}, access_claims(), hmac_key=hmac_key)
    assert_refused(await get(ed_app, bearer(token)))


async def test_eddsa_token_against_hs256_seller(hs_app: Sanic[Any, Any]) -> None:
    """The reverse confusion: a validly signed EdDSA token where HS256 is pinned."""
    token = forge(
        {"alg": "EdDSA", "typ": "at+jwt", "kid": HS_KID},
        access_claims(),
        ed25519_key=Ed25519PrivateKey.generate(),
    )
    assert_refused(await get(hs_app, bearer(token)))


@pytest.mark.parametrize("kid", ["another-key", "", None, 7])
async def test_token_for_another_kid(hs_app: Sanic[Any, Any], kid: Any) -> None:
    """Correctly signed with the seller's secret, but naming another key (or none)."""
    header: dict[str, Any] = {"alg": "HS256", "typ": "at+jwt"}
    if kid is not None:
        header["kid"] = kid
    token = forge(header, access_claims(), hmac_key=SECRET.encode())
    assert_refused(await get(hs_app, bearer(token)))


async def test_token_signed_by_another_ed25519_key_with_its_own_kid(
    ed_app: Sanic[Any, Any],
) -> None:
    other = Ed25519PrivateKey.generate()
    token = forge(
        {"alg": "EdDSA", "typ": "at+jwt", "kid": Ed25519KeySource(other).kid},
        access_claims(),
        ed25519_key=other,
    )
    assert_refused(await get(ed_app, bearer(token)))


@pytest.mark.parametrize("typ", ["JWT", "jwt", "at+JWT+x", "", None, 1])
async def test_typ_not_at_jwt(hs_app: Sanic[Any, Any], typ: Any) -> None:
    """An ID token or any other JWT signed with the same key is not an access token."""
    header: dict[str, Any] = {"alg": "HS256", "kid": HS_KID}
    if typ is not None:
        header["typ"] = typ
    token = forge(header, access_claims(), hmac_key=SECRET.encode())
    assert_refused(await get(hs_app, bearer(token)))


async def test_unknown_critical_header(hs_app: Sanic[Any, Any]) -> None:
    token = hs_token(header={"crit": ["x-policy"], "x-policy": "ignore-exp"})
    assert_refused(await get(hs_app, bearer(token)))


async def test_two_authorization_headers(hs_app: Sanic[Any, Any]) -> None:
    """Proxies and frameworks disagree on which of two headers counts: refuse both."""
    _, response = await hs_app.asgi_client.get(
        "/api/data",
        headers=[("Authorization", f"Bearer {hs_token()}"), ("Authorization", "Bearer x.y.z")],
    )
    assert_refused(response)
