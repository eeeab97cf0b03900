"""The ``jwt`` issuer: header, claims, kid, expiry and JWKS, with a frozen clock."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support.credentials import (
    AGENT_URL,
    FROZEN_NOW,
    SECRET,
    TTL,
    FrozenClock,
    build_issuer,
    grant_request,
    make_config,
)
from x402srv.errors import ConfigError
from x402srv.interfaces import CredentialIssuer
from x402srv.server.registry import Registry
from x402srv.tokens.verify import ed25519_key_id, hs256_key_id

_NO_EXP: jwt.types.Options = {"verify_exp": False}


def _segments(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, claims, _ = token.split(".")
    return (
        json.loads(base64.urlsafe_b64decode(header + "==")),
        json.loads(base64.urlsafe_b64decode(claims + "==")),
    )


def _pem(key: Any) -> str:
    return str(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
    )


def test_builtin_issuers_are_registered_by_name() -> None:
    names = Registry(entry_points=False).names("credential issuer")
    assert {"jwt", "callback"} <= set(names)


async def test_hs256_token_header_and_claims(clock: FrozenClock) -> None:
    issuer = build_issuer("jwt", make_config(secret=SECRET), clock)
    assert isinstance(issuer, CredentialIssuer)
    await issuer.start()
    credential = await issuer.issue(grant_request())
    await issuer.close()

    header, claims = _segments(credential.token)
    assert header == {"alg": "HS256", "typ": "at+jwt", "kid": hs256_key_id(SECRET.encode())}
    assert claims == {
        "iss": AGENT_URL,
        "sub": "6f1c2b8e-6a43-4d0e-9a65-2f3b9b1d7c11",
        "aud": AGENT_URL,
        "iat": FROZEN_NOW,
        "exp": FROZEN_NOW + TTL,
        "jti": "ch_7Yq2n4Kp",
        "resourceId": "weather:berlin",
        "planId": "hourly",
        "txHash": "0x" + "ab" * 32,
        "payer": "0x" + "22" * 20,
    }
    assert credential.token_type == "Bearer"
    assert credential.expires_at == FROZEN_NOW + TTL
    # an independent check of the signature (pyjwt reads the wall clock: time is frozen here)
    decoded = jwt.decode(
        credential.token, SECRET, algorithms=["HS256"], audience=AGENT_URL, options=_NO_EXP
    )
    assert decoded == claims


async def test_exp_follows_the_plan_ttl_and_the_clock(clock: FrozenClock) -> None:
    issuer = build_issuer("jwt", make_config(secret=SECRET), clock)
    clock.advance(12.75)  # fractions are dropped: NumericDate in whole seconds
    credential = await issuer.issue(grant_request(token_ttl_seconds=60))
    _, claims = _segments(credential.token)
    assert claims["iat"] == FROZEN_NOW + 12
    assert claims["exp"] == FROZEN_NOW + 12 + 60
    assert credential.expires_at == claims["exp"]


async def test_audience_and_kid_come_from_config(clock: FrozenClock) -> None:
    config = make_config(secret=SECRET, audience="https://data.example.com", kid="2026-01")
    credential = await build_issuer("jwt", config, clock).issue(grant_request())
    header, claims = _segments(credential.token)
    assert header["kid"] == "2026-01"
    assert claims["aud"] == "https://data.example.com"
    assert claims["iss"] == AGENT_URL


def test_hs256_kid_names_the_secret_without_revealing_it() -> None:
    kid = hs256_key_id(SECRET.encode())
    assert len(kid) == 16
    assert int(kid, 16) >= 0
    assert kid == hs256_key_id(SECRET.encode())
    assert kid != hs256_key_id(SECRET.encode() + b"!")
    assert kid not in SECRET


async def test_eddsa_token_header_claims_and_kid(
    clock: FrozenClock, ed25519_key: Ed25519PrivateKey, ed25519_pem: str
) -> None:
    issuer = build_issuer("jwt", make_config(algorithm="EdDSA", private_key=ed25519_pem), clock)
    credential = await issuer.issue(grant_request())
    header, claims = _segments(credential.token)
    assert header == {
        "alg": "EdDSA",
        "typ": "at+jwt",
        "kid": ed25519_key_id(ed25519_key.public_key()),
    }
    assert claims["exp"] == FROZEN_NOW + TTL
    decoded = jwt.decode(
        credential.token,
        ed25519_key.public_key(),
        algorithms=["EdDSA"],
        audience=AGENT_URL,
        options=_NO_EXP,
    )
    assert decoded == claims


def test_ed25519_kid_is_the_rfc7638_thumbprint() -> None:
    """RFC 8037 appendix A.2/A.3: the published key and its published thumbprint."""
    d = base64.urlsafe_b64decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")
    key = Ed25519PrivateKey.from_private_bytes(d)
    assert ed25519_key_id(key.public_key()) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


async def test_eddsa_jwks_shape(
    clock: FrozenClock, ed25519_key: Ed25519PrivateKey, ed25519_pem: str
) -> None:
    issuer = build_issuer("jwt", make_config(algorithm="EdDSA", private_key=ed25519_pem), clock)
    jwks = issuer.jwks()
    raw = ed25519_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    assert jwks == {
        "keys": [
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "x": x,
                "kid": ed25519_key_id(ed25519_key.public_key()),
                "alg": "EdDSA",
                "use": "sig",
            }
        ]
    }
    # a JWKS consumer (here pyjwt's PyJWK) verifies our tokens with it
    token = (await issuer.issue(grant_request())).token
    published = jwt.PyJWK(jwks["keys"][0])
    decoded = jwt.decode(
        token, published, algorithms=["EdDSA"], audience=AGENT_URL, options=_NO_EXP
    )
    assert decoded["jti"] == "ch_7Yq2n4Kp"
    # the caller gets a copy: the app may not alter what the next request serves
    jwks["keys"][0]["x"] = "tampered"
    assert issuer.jwks()["keys"][0]["x"] == x


def test_eddsa_jwks_uses_the_configured_kid(clock: FrozenClock, ed25519_pem: str) -> None:
    config = make_config(algorithm="EdDSA", private_key=ed25519_pem, kid="k1")
    assert build_issuer("jwt", config, clock).jwks()["keys"][0]["kid"] == "k1"


def test_hs256_has_no_jwks(clock: FrozenClock) -> None:
    assert build_issuer("jwt", make_config(secret=SECRET), clock).jwks() is None


@pytest.mark.parametrize(
    ("credentials", "path"),
    [
        pytest.param({}, "credentials.secret", id="no-secret"),
        pytest.param({"secret": "s" * 31}, "credentials.secret", id="short-secret"),
        pytest.param({"algorithm": "EdDSA"}, "credentials.private_key", id="no-private-key"),
        pytest.param(
            {"algorithm": "EdDSA", "private_key": "not a pem"},
            "credentials.private_key",
            id="garbage-pem",
        ),
    ],
)
def test_unusable_key_is_a_config_error(
    clock: FrozenClock, credentials: dict[str, Any], path: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build_issuer("jwt", make_config(**credentials), clock)
    assert caught.value.path == path


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(lambda: rsa.generate_private_key(65537, 2048), id="rsa"),
        pytest.param(lambda: ec.generate_private_key(ec.SECP256R1()), id="p256"),
    ],
)
def test_eddsa_needs_an_ed25519_key(clock: FrozenClock, key: Any) -> None:
    config = make_config(algorithm="EdDSA", private_key=_pem(key()))
    with pytest.raises(ConfigError, match="Ed25519") as caught:
        build_issuer("jwt", config, clock)
    assert caught.value.path == "credentials.private_key"


def test_encrypted_pem_is_a_config_error_without_the_key(
    clock: FrozenClock, ed25519_key: Ed25519PrivateKey
) -> None:
    pem = ed25519_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase"),
    ).decode()
    with pytest.raises(ConfigError) as caught:
        build_issuer("jwt", make_config(algorithm="EdDSA", private_key=pem), clock)
    assert caught.value.path == "credentials.private_key"
    assert "PRIVATE KEY" not in str(caught.value)


def test_short_secret_error_does_not_echo_the_secret(clock: FrozenClock) -> None:
    with pytest.raises(ConfigError) as caught:
        build_issuer("jwt", make_config(secret="hunter2-hunter2"), clock)
    assert "hunter2" not in str(caught.value)


def test_jwt_issuer_takes_no_options_table(clock: FrozenClock) -> None:
    with pytest.raises(ConfigError, match=r"credentials\.jwt\.ttl: unknown key"):
        build_issuer("jwt", make_config(secret=SECRET), clock, options={"ttl": 5})


def test_repr_shows_no_key_material(clock: FrozenClock, ed25519_pem: str) -> None:
    hs = build_issuer("jwt", make_config(secret=SECRET), clock)
    ed = build_issuer("jwt", make_config(algorithm="EdDSA", private_key=ed25519_pem), clock)
    assert SECRET not in repr(hs)
    assert "PRIVATE" not in repr(ed)
