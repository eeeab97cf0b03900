"""``[offer_receipt]``: the key that signs offers and receipts (docs/offer-receipt.md).

    format   key (a secret reference)                        kid / published as
    -------  ----------------------------------------------  --------------------------------------
    eip712   a secp256k1 private key, 0x and 64 hex digits   the address (recovered from each
                                                             signature), in /.well-known/did.json
    jws      an Ed25519 private key, PKCS#8 PEM (EdDSA)      did:web:<agent_url host>#key-1, its
                                                             JWK in /.well-known/did.json

The key is checked when the config is loaded: a wrong key is a config error at
start-up, never a 402 without its offers.
"""

from __future__ import annotations

import re
from typing import Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from pydantic import Field, model_validator

from x402srv.config.fields import StrictModel
from x402srv.config.secrets import SecretValue

__all__ = ["OfferReceiptConfig", "ed25519_key", "secp256k1_key"]

_HEX_KEY = re.compile(r"0x[0-9a-fA-F]{64}")


def secp256k1_key(text: str) -> bytes:
    if not _HEX_KEY.fullmatch(text.strip()):
        raise ValueError("an eip712 key is a secp256k1 private key: 0x and 64 hex digits")
    key = bytes.fromhex(text.strip()[2:])
    if not 0 < int.from_bytes(key, "big") < _SECP256K1_ORDER:
        raise ValueError("an eip712 key must be a valid secp256k1 private key")
    return key


def ed25519_key(text: str) -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("a jws key is an Ed25519 private key in PKCS#8 PEM") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("a jws key must be Ed25519 (its JWS alg is EdDSA)")
    return key


_SECP256K1_ORDER = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class OfferReceiptConfig(StrictModel):
    format: Literal["eip712", "jws"] = "eip712"
    key: SecretValue
    #: The settlement transaction in receipts (off by default: the extension's privacy default).
    include_tx_hash: bool = False
    #: How long an offer is valid; default: each requirement's maxTimeoutSeconds.
    offer_validity_seconds: int | None = Field(default=None, gt=0, le=86_400)

    @model_validator(mode="after")
    def _key_fits(self) -> OfferReceiptConfig:
        if self.format == "eip712":
            secp256k1_key(self.key.reveal())
        else:
            ed25519_key(self.key.reveal())
        return self
