"""Fixtures for the credential issuers, token verification and the token guard."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sanic import Sanic

from tests.support.credentials import FrozenClock

# Every guard test builds its own app under the same name (the root conftest
# sets this too; kept here so these tests stand alone).
Sanic.test_mode = True


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture(scope="session")
def ed25519_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="session")
def ed25519_pem(ed25519_key: Ed25519PrivateKey) -> str:
    return ed25519_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture(scope="session")
def ed25519_public_pem(ed25519_key: Ed25519PrivateKey) -> str:
    return (
        ed25519_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
