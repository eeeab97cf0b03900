"""Key rotation with overlapping kids: ``[credentials] previous_keys``."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.support.credentials import SECRET, FrozenClock, build_issuer, grant_request, make_config
from tests.support.seller import Seller
from x402srv.errors import ConfigError, InvalidToken
from x402srv.tokens.jwks import JWKSKeySource
from x402srv.tokens.verify import TokenVerifier

OLD_SECRET = "an-older-secret-that-is-long-enough-" + "x" * 16


def pem(key: Ed25519PrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


async def test_hs256_previous_secret_still_verifies(clock: FrozenClock) -> None:
    old = build_issuer("jwt", make_config(secret=OLD_SECRET), clock)
    old_token = (await old.issue(grant_request())).token
    rotated = make_config(secret=SECRET, previous_keys=[OLD_SECRET])
    new_token = (await build_issuer("jwt", rotated, clock).issue(grant_request())).token
    verifier = TokenVerifier.from_config(rotated, clock=clock)
    assert (await verifier.verify(old_token)).request_id == grant_request().request_id
    assert (await verifier.verify(new_token)).request_id == grant_request().request_id
    retired = TokenVerifier.from_config(make_config(secret=SECRET), clock=clock)
    with pytest.raises(InvalidToken):
        await retired.verify(old_token)


async def test_eddsa_jwks_lists_current_and_previous(clock: FrozenClock) -> None:
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    old = build_issuer("jwt", make_config(algorithm="EdDSA", private_key=pem(old_key)), clock)
    old_token = (await old.issue(grant_request())).token
    rotated = make_config(
        algorithm="EdDSA",
        private_key=pem(new_key),
        previous_keys=[{"key": pem(old_key), "kid": None}],
    )
    issuer = build_issuer("jwt", rotated, clock)
    kids = [key["kid"] for key in issuer.jwks()["keys"]]
    assert kids == [issuer.kid, old.kid]
    verifier = TokenVerifier.from_config(rotated, clock=clock)
    assert (await verifier.verify(old_token)).challenge_id == grant_request().challenge_id
    assert (await verifier.verify((await issuer.issue(grant_request())).token)).plan_id == "hourly"


def test_previous_key_errors_name_their_path() -> None:
    with pytest.raises(ConfigError, match=r"credentials\.previous_keys\[0\]"):
        TokenVerifier.from_config(make_config(secret=SECRET, previous_keys=["short"]))
    with pytest.raises(ConfigError, match="share a kid"):
        TokenVerifier.from_config(make_config(secret=SECRET, previous_keys=[SECRET]))


async def test_a_real_server_publishes_both_keys_during_rotation(
    start_seller: Callable[..., Seller], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An EdDSA seller restarted with a new key and the old one as previous: old tokens live on."""
    old_key, new_key = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys = tmp_path_factory.mktemp("keys")
    (keys / "old.pem").write_text(pem(old_key))
    (keys / "new.pem").write_text(pem(new_key))
    seller = start_seller(
        "facilitator",
        credentials={"algorithm": "EdDSA", "private_key": {"file": str(keys / "old.pem")}},
    )
    jwks_url = f"{seller.server.url}/.well-known/jwks.json"
    before = httpx.get(jwks_url).json()["keys"]
    assert len(before) == 1
    seller.server.config = {
        **seller.server.config,
        "credentials": {
            "algorithm": "EdDSA",
            "private_key": {"file": str(keys / "new.pem")},
            "previous_keys": [{"file": str(keys / "old.pem")}],
        },
    }
    seller.server.start()
    after = httpx.get(jwks_url).json()["keys"]
    assert [k["kid"] for k in after][1:] == [before[0]["kid"]]
    source = JWKSKeySource(jwks_url, allow_http=True)
    for entry in after:
        assert await source.key_for(entry["kid"]) is not None
