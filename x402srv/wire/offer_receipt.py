"""Signed offers and receipts: the x402 ``offer-receipt`` extension (docs/offer-receipt.md).

The wire format is the TypeScript SDK's (``@x402/extensions/offer-receipt``),
which its verifiers accept:

    where                            what
    -------------------------------  -----------------------------------------------------------
    402 ``extensions``               ``{"offer-receipt": {"info": {"offers": [...]}, "schema"}}``,
                                     one signed offer per ``accepts[]`` entry, in its order
    PAYMENT-RESPONSE ``extensions``  ``{"offer-receipt": {"info": {"receipt": ...}, "schema"}}``
    AccessGrant ``receipt``          the same signed receipt
    ``/.well-known/did.json``        the signing key, as a did:web document

    offer payload    version 1, resourceUrl, scheme, network, asset, payTo, amount, validUntil
    receipt payload  version 1, network, resourceUrl, payer, issuedAt, transaction (EIP-712:
                     "" when not included; JWS: absent)
    eip712           ``{format, acceptIndex?, payload, signature}``; domain "x402 offer" or
                     "x402 receipt", version "1", chainId 1; the signer is recovered
    jws              ``{format, acceptIndex?, signature}``: compact JWS, header
                     ``{"alg","kid"}``, payload in JCS (RFC 8785) form

Offers are signed again only when half their validity has passed: a 402 costs
no signature most of the time, and every offer a buyer sees is valid for at
least half the configured time. A receipt is signed once, when the grant is
delivered, and kept in the grant: a replay answers the same receipt.
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final
from urllib.parse import quote, urlsplit

from x402srv.config.offer_receipt import OfferReceiptConfig, ed25519_key, secp256k1_key
from x402srv.interfaces import Clock, system_clock

__all__ = ["OFFER_RECEIPT", "OfferReceiptSigner", "canonical_json"]

OFFER_RECEIPT: Final = "offer-receipt"
VERSION: Final = 1
_DID_CONTEXT: Final = [
    "https://www.w3.org/ns/did/v1",
    "https://w3id.org/security/suites/jws-2020/v1",
]
_MAX_CACHED: Final = 1024

#: The JSON Schemas the TypeScript server extension sends beside ``info``.
OFFER_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "offers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "format": {"type": "string"},
                    "acceptIndex": {"type": "integer"},
                    "payload": {
                        "type": "object",
                        "properties": {
                            "version": {"type": "integer"},
                            "resourceUrl": {"type": "string"},
                            "scheme": {"type": "string"},
                            "network": {"type": "string"},
                            "asset": {"type": "string"},
                            "payTo": {"type": "string"},
                            "amount": {"type": "string"},
                            "validUntil": {"type": "integer"},
                        },
                        "required": [
                            "version",
                            "resourceUrl",
                            "scheme",
                            "network",
                            "asset",
                            "payTo",
                            "amount",
                        ],
                    },
                    "signature": {"type": "string"},
                },
                "required": ["format", "signature"],
            },
        }
    },
    "required": ["offers"],
}
RECEIPT_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "receipt": {
            "type": "object",
            "properties": {
                "format": {"type": "string"},
                "payload": {
                    "type": "object",
                    "properties": {
                        "version": {"type": "integer"},
                        "network": {"type": "string"},
                        "resourceUrl": {"type": "string"},
                        "payer": {"type": "string"},
                        "issuedAt": {"type": "integer"},
                        "transaction": {"type": "string"},
                    },
                    "required": ["version", "network", "resourceUrl", "payer", "issuedAt"],
                },
                "signature": {"type": "string"},
            },
            "required": ["format", "signature"],
        }
    },
    "required": ["receipt"],
}

_DOMAIN_TYPE: Final = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
]
_OFFER_TYPE: Final = [
    {"name": "version", "type": "uint256"},
    {"name": "resourceUrl", "type": "string"},
    {"name": "scheme", "type": "string"},
    {"name": "network", "type": "string"},
    {"name": "asset", "type": "string"},
    {"name": "payTo", "type": "string"},
    {"name": "amount", "type": "string"},
    {"name": "validUntil", "type": "uint256"},
]
_RECEIPT_TYPE: Final = [
    {"name": "version", "type": "uint256"},
    {"name": "network", "type": "string"},
    {"name": "resourceUrl", "type": "string"},
    {"name": "payer", "type": "string"},
    {"name": "issuedAt", "type": "uint256"},
    {"name": "transaction", "type": "string"},
]


# ------------------------------------------------------------------ JCS (RFC 8785)


def _string(text: str) -> str:
    out = ['"']
    for char in text:
        if ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        elif char in '"\\':
            out.append("\\" + char)
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def canonical_json(value: Any) -> str:
    """JCS for the values a payload holds: keys in UTF-16 order, integers, minimal escapes."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be"))
        return "{" + ",".join(_string(k) + ":" + canonical_json(value[k]) for k in keys) + "}"
    raise TypeError(f"no canonical JSON for {type(value).__name__}")  # floats: none in payloads


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


# ------------------------------------------------------------------ the signer


def did_web(agent_url: str) -> str:
    """``did:web`` of the seller's public URL (host, port as %3A, then path segments)."""
    parts = urlsplit(agent_url)
    segments = [quote(s, safe="") for s in parts.path.split("/") if s]
    return ":".join(["did:web", quote(parts.netloc, safe=""), *segments])


def did_document_path(agent_url: str) -> str:
    """Where a did:web resolver looks for the document of ``did_web(agent_url)``."""
    path = urlsplit(agent_url).path.rstrip("/")
    return f"{path}/did.json" if path else "/.well-known/did.json"


class OfferReceiptSigner:
    def __init__(
        self, config: OfferReceiptConfig, agent_url: str, *, clock: Clock = system_clock
    ) -> None:
        self._config = config
        self._clock = clock
        self.did = did_web(agent_url)
        self.kid = f"{self.did}#key-1"
        self.format = config.format
        self._offers: dict[tuple[Any, ...], tuple[int, int, list[dict[str, Any]]]] = {}
        if config.format == "eip712":
            # (eth_account here, not at the top: it takes ~0.25 s of CPU to import, and
            # every x402srv process imports this module, a seller without receipts too)
            from eth_account import Account

            self._eth_key = secp256k1_key(config.key.reveal())
            self.address: str | None = Account.from_key(self._eth_key).address
        else:
            self._ed_key = ed25519_key(config.key.reveal())
            self.address = None

    # -------------------------------------------------------------- signing

    def _eip712(
        self, domain: str, primary: str, fields: list[dict[str, str]], payload: dict[str, Any]
    ) -> str:
        typed = {
            "types": {"EIP712Domain": _DOMAIN_TYPE, primary: fields},
            "primaryType": primary,
            "domain": {"name": domain, "version": "1", "chainId": 1},
            "message": payload,
        }
        from eth_account import Account
        from eth_account.messages import encode_typed_data

        signed = Account.sign_message(encode_typed_data(full_message=typed), self._eth_key)
        return "0x" + bytes(signed.signature).hex()

    def _jws(self, payload: dict[str, Any]) -> str:
        header = json.dumps({"alg": "EdDSA", "kid": self.kid}, separators=(",", ":"))
        signing_input = _b64url(header.encode()) + "." + _b64url(canonical_json(payload).encode())
        return signing_input + "." + _b64url(self._ed_key.sign(signing_input.encode("ascii")))

    def _offer(
        self, resource_url: str, index: int, accept: dict[str, Any], valid_until: int
    ) -> dict[str, Any]:
        payload = {
            "version": VERSION,
            "resourceUrl": resource_url,
            "scheme": accept["scheme"],
            "network": accept["network"],
            "asset": accept["asset"],
            "payTo": accept["payTo"],
            "amount": accept["amount"],
            "validUntil": valid_until,
        }
        if self.format == "jws":
            return {"format": "jws", "acceptIndex": index, "signature": self._jws(payload)}
        signature = self._eip712("x402 offer", "Offer", _OFFER_TYPE, payload)
        return {
            "format": "eip712",
            "acceptIndex": index,
            "payload": payload,
            "signature": signature,
        }

    def offers(self, resource_url: str, accepts: list[dict[str, Any]]) -> dict[str, Any]:
        """The 402's ``extensions["offer-receipt"]``: one signed offer per requirement."""
        terms = tuple(
            (a["scheme"], a["network"], a["asset"], a["payTo"], a["amount"], a["maxTimeoutSeconds"])
            for a in accepts
        )
        key = (resource_url, terms)
        now = int(self._clock())
        cached = self._offers.get(key)
        if cached is None or now >= cached[0] - cached[1] // 2:
            signed: list[dict[str, Any]] = []
            valid_until = 0
            shortest = 0
            for index, accept in enumerate(accepts):
                validity = self._config.offer_validity_seconds or int(accept["maxTimeoutSeconds"])
                valid_until, shortest = now + validity, min(shortest or validity, validity)
                signed.append(self._offer(resource_url, index, accept, valid_until))
            if len(self._offers) >= _MAX_CACHED:
                self._offers.clear()
            cached = self._offers[key] = (now + shortest, shortest, signed)
        return {"info": {"offers": cached[2]}, "schema": OFFER_SCHEMA}

    def receipt(
        self, resource_url: str, payer: str, network: str, transaction: str | None
    ) -> dict[str, Any]:
        """A signed receipt for a delivered purchase (the transaction only if configured)."""
        included = transaction if self._config.include_tx_hash and transaction else None
        payload: dict[str, Any] = {
            "version": VERSION,
            "network": network,
            "resourceUrl": resource_url,
            "payer": payer,
            "issuedAt": int(self._clock()),
        }
        if self.format == "jws":
            if included:
                payload["transaction"] = included
            return {"format": "jws", "signature": self._jws(payload)}
        payload["transaction"] = included or ""
        signature = self._eip712("x402 receipt", "Receipt", _RECEIPT_TYPE, payload)
        return {"format": "eip712", "payload": payload, "signature": signature}

    @staticmethod
    def receipt_extension(receipt: dict[str, Any]) -> dict[str, Any]:
        return {"info": {"receipt": receipt}, "schema": RECEIPT_SCHEMA}

    # -------------------------------------------------------------- publishing

    def did_document(self) -> dict[str, Any]:
        """The did:web document that binds the signing key to the seller's host."""
        method: dict[str, Any] = {"id": self.kid, "controller": self.did}
        if self.format == "jws":
            raw = self._ed_key.public_key().public_bytes_raw()
            method["type"] = "JsonWebKey2020"
            method["publicKeyJwk"] = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw)}
        else:
            method["type"] = "EcdsaSecp256k1RecoveryMethod2020"
            method["blockchainAccountId"] = f"eip155:1:{self.address}"
        return {
            "@context": _DID_CONTEXT,
            "id": self.did,
            "verificationMethod": [method],
            "assertionMethod": [self.kid],
        }
