"""sign-in-with-x on the wire: the 402's declaration, the header, the message.

See docs/sign-in-with-x.md. The declaration is what the official SDKs' server extension puts in
``extensions["sign-in-with-x"]`` of each 402 (``info``: domain, uri, version,
nonce, issuedAt, expirationTime, resources and the seller's statement;
``supportedChains``; the payload's JSON Schema). A buyer signs it as an
EIP-4361 (SIWE) message and sends it back, base64 JSON, in ``SIGN-IN-WITH-X``.

The nonce says what it was declared for: its first 16 hex digits are a hash of
the seller's access URL and the *scope* (a plan and resource at /x402/access,
a route of the gateway), the other 32 are random. The buyer signs the nonce,
so a message signed for one plan or route proves nothing for another, nor at
another seller; ``x402srv.access.sign_in`` checks that and uses each nonce once.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import urlsplit

from x402srv.access.ids import token_hex16
from x402srv.config.siwx import SiwxConfig
from x402srv.errors import SiwxInvalid

__all__ = [
    "HEADER",
    "SCHEMA",
    "SIGN_IN_WITH_X",
    "SiwxDeclarer",
    "SiwxPayload",
    "access_scope",
    "iso_time",
    "parse_header",
    "route_scope",
    "scope_tag",
    "siwe_message",
]

SIGN_IN_WITH_X: Final = "sign-in-with-x"
HEADER: Final = "SIGN-IN-WITH-X"
#: A header longer than this is no sign-in (a message with a contract wallet's
#: EIP-6492 signature, deployment data included, stays well below it).
MAX_HEADER_BYTES: Final = 8 * 1024
_TAG_HEX: Final = 16
_NONCE: Final = re.compile(r"[0-9a-f]{48}")
_SIGNATURE: Final = re.compile(r"0x(?:[0-9a-fA-F]{2})+")
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}")
_CHAIN: Final = re.compile(r"eip155:[1-9][0-9]{0,18}")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]*={0,2}")

#: What the official SDKs' ``build_siwx_schema`` declares beside ``info``.
SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "domain": {"type": "string"},
        "address": {"type": "string"},
        "statement": {"type": "string"},
        "uri": {"type": "string", "format": "uri"},
        "version": {"type": "string"},
        "chainId": {"type": "string"},
        "type": {"type": "string"},
        "nonce": {"type": "string"},
        "issuedAt": {"type": "string", "format": "date-time"},
        "expirationTime": {"type": "string", "format": "date-time"},
        "notBefore": {"type": "string", "format": "date-time"},
        "requestId": {"type": "string"},
        "resources": {"type": "array", "items": {"type": "string", "format": "uri"}},
        "signature": {"type": "string"},
    },
    "required": [
        "domain",
        "address",
        "uri",
        "version",
        "chainId",
        "type",
        "nonce",
        "issuedAt",
        "signature",
    ],
}


#: Timestamps ``iso_time`` formats from a cached second (years 1970 to 9999).
_FAST_SECONDS: Final = range(0, 253_402_300_800)


@functools.lru_cache(maxsize=256)
def _iso_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))


def iso_time(timestamp: float) -> str:
    """UTC with milliseconds and ``Z``, the SDKs' ``issuedAt`` form.

    Every 402 declares two of these, so the text of a second is cached and the
    milliseconds appended: exactly what ``datetime.fromtimestamp(timestamp,
    UTC).isoformat(timespec="milliseconds")`` writes (it rounds the fraction
    to microseconds half to even, then cuts to milliseconds).
    """
    fraction, whole = math.modf(timestamp)
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    second = int(whole)
    if micros < 0 or second not in _FAST_SECONDS:  # before 1970 or after 9999: the slow way
        text = datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")
        return text.replace("+00:00", "Z")
    return f"{_iso_second(second)}{micros // 1000:03d}Z"


def access_scope(plan_id: str | None, resource_id: str) -> str:
    """/x402/access: one plan's grants on one resource (discovery: any plan's)."""
    return f"access {plan_id or '*'} {resource_id}"


def route_scope(prefix: str) -> str:
    """The gateway: the grants of the plans one route accepts."""
    return f"route {prefix}"


@functools.lru_cache(maxsize=1024)
def scope_tag(access_url: str, scope: str) -> str:
    """The nonce's first 16 hex digits: what the message was declared for, at which seller."""
    digest = hashlib.sha256(f"x402srv-siwx/1\n{access_url}\n{scope}".encode()).hexdigest()
    return digest[:_TAG_HEX]


class SiwxDeclarer:
    """Builds each 402's declaration: a fresh nonce and times per answer."""

    def __init__(self, config: SiwxConfig, agent_url: str, access_url: str) -> None:
        self.config = config
        self.access_url = access_url
        self.domain = urlsplit(agent_url).netloc
        self._info_parts: dict[str, tuple[str, str, str]] = {}

    def declaration(
        self, *, scope: str, uri: str, networks: Iterable[str], now: float
    ) -> dict[str, Any]:
        """``extensions["sign-in-with-x"]`` for a 402 about ``uri`` that opens ``scope``."""
        info: dict[str, Any] = {
            "domain": self.domain,
            "uri": uri,
            "version": "1",
            "nonce": self._nonce(scope),
            "issuedAt": iso_time(now),
            "resources": [uri],
            "expirationTime": iso_time(now + self.config.expiration_seconds),
        }
        if self.config.statement is not None:
            info["statement"] = self.config.statement
        return {"info": info, **_chains_and_schema(tuple(networks))}

    def _nonce(self, scope: str) -> str:
        """The scope's tag and 32 random hex digits (``secrets.token_hex(16)``'s source)."""
        return scope_tag(self.access_url, scope) + token_hex16()

    def member(self, *, scope: str, uri: str, networks: tuple[str, ...], now: float) -> str:
        """The declaration as the compact JSON member ``"sign-in-with-x":{...}`` of a 402.

        Made per answer (its nonce and times are) between cached parts (the
        JSON around them, ``_info_parts``, and the tail): what a 402 costs more
        is a random nonce and two times. The same text as ``_compact`` of
        ``declaration``'s ``info`` (tests/unit/test_siwx_wire.py compares them).
        """
        parts = self._info_parts.get(uri)
        if parts is None:
            if len(self._info_parts) >= _MAX_URIS:
                self._info_parts.clear()
            parts = self._info_parts[uri] = self._parts(uri)
        head, middle, end = parts
        return (
            f"{head}{self._nonce(scope)}{_ISSUED_AT}{iso_time(now)}{middle}"
            f"{iso_time(now + self.config.expiration_seconds)}{end}{_tail(networks)}"
        )

    def _parts(self, uri: str) -> tuple[str, str, str]:
        """The JSON of ``info`` around its nonce, issuedAt and expirationTime (in that order)."""
        statement = self.config.statement
        return (
            f'{_MEMBER_HEAD}{{"domain":{_compact(self.domain)},"uri":{_compact(uri)},'
            '"version":"1","nonce":"',
            f'","resources":{_compact([uri])},"expirationTime":"',
            '"' + (f',"statement":{_compact(statement)}' if statement is not None else "") + "}",
        )


_MEMBER_HEAD: Final = json.dumps(SIGN_IN_WITH_X) + ':{"info":'
_ISSUED_AT: Final = '","issuedAt":"'
#: Resource URIs whose ``info`` parts a declarer keeps (the access URL, gateway routes).
_MAX_URIS: Final = 256


def _compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


@functools.lru_cache(maxsize=64)
def _chains_and_schema(networks: tuple[str, ...]) -> dict[str, Any]:
    chains = list(dict.fromkeys(n for n in networks if n.startswith("eip155:")))
    return {
        "supportedChains": [{"chainId": chain, "type": "eip191"} for chain in chains],
        "schema": SCHEMA,
    }


@functools.lru_cache(maxsize=64)
def _tail(networks: tuple[str, ...]) -> str:
    """``,"supportedChains":[...],"schema":{...}}``: the same for every 402 of these networks."""
    return "," + _compact(_chains_and_schema(networks))[1:]


@dataclass(frozen=True, slots=True)
class SiwxPayload:
    """The buyer's signed message, as ``SIGN-IN-WITH-X`` carries it (checked for form only)."""

    domain: str
    address: str
    uri: str
    version: str
    chain_id: str
    type: str
    nonce: str
    issued_at: str
    signature: str
    statement: str | None = None
    expiration_time: str | None = None
    not_before: str | None = None
    request_id: str | None = None
    resources: tuple[str, ...] | None = None
    signature_scheme: str | None = None

    @property
    def numeric_chain_id(self) -> int:
        return int(self.chain_id.split(":", 1)[1])


_REQUIRED: Final = {
    "domain": "domain",
    "address": "address",
    "uri": "uri",
    "version": "version",
    "chainId": "chain_id",
    "type": "type",
    "nonce": "nonce",
    "issuedAt": "issued_at",
    "signature": "signature",
}
_OPTIONAL: Final = {
    "statement": "statement",
    "expirationTime": "expiration_time",
    "notBefore": "not_before",
    "requestId": "request_id",
    "signatureScheme": "signature_scheme",
}


def _line(name: str, value: object) -> str:
    """A string that fits on one line of the message (a newline would forge another field)."""
    if not isinstance(value, str) or "\n" in value or "\r" in value or len(value) > 2048:
        raise SiwxInvalid(f"{name} must be a one-line string")
    return value


def parse_header(value: str) -> SiwxPayload:
    """The header's payload, every field of the right form; 400 ``SIWX_INVALID`` otherwise."""
    if len(value) > MAX_HEADER_BYTES or not _BASE64.fullmatch(value):
        raise SiwxInvalid(f"{HEADER} must be base64 JSON of at most {MAX_HEADER_BYTES} bytes")
    try:
        document = json.loads(base64.b64decode(value + "=" * (-len(value) % 4), validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise SiwxInvalid(f"{HEADER} must be base64 JSON") from None
    if not isinstance(document, dict):
        raise SiwxInvalid(f"{HEADER} must be a JSON object")
    fields: dict[str, Any] = {}
    for key, name in _REQUIRED.items():
        if key not in document:
            raise SiwxInvalid(f"{HEADER}: {key} is missing")
        fields[name] = _line(key, document[key])
    for key, name in _OPTIONAL.items():
        if document.get(key) is not None:
            fields[name] = _line(key, document[key])
    resources = document.get("resources")
    if resources is not None:
        if not isinstance(resources, list) or len(resources) > 16:
            raise SiwxInvalid(f"{HEADER}: resources must be a list of at most 16 URIs")
        fields["resources"] = tuple(_line("resources[]", r) for r in resources)
    payload = SiwxPayload(**fields)
    if not _CHAIN.fullmatch(payload.chain_id) or payload.type != "eip191":
        raise SiwxInvalid(f"{HEADER}: only eip155 chains with eip191 messages are accepted")
    if not _ADDRESS.fullmatch(payload.address):
        raise SiwxInvalid(f"{HEADER}: address must be a 0x-prefixed 20-byte hex address")
    if not _SIGNATURE.fullmatch(payload.signature):
        raise SiwxInvalid(f"{HEADER}: signature must be 0x-prefixed hex")
    if not _NONCE.fullmatch(payload.nonce):
        raise SiwxInvalid(f"{HEADER}: the nonce is not one this seller declares")
    return payload


def siwe_message(payload: SiwxPayload) -> str:
    """The EIP-4361 text the buyer signed, line for line as the SDKs' ``siwe`` writes it."""
    prefix = f"{payload.domain} wants you to sign in with your Ethereum account:\n{payload.address}"
    fields = [
        f"URI: {payload.uri}",
        f"Version: {payload.version}",
        f"Chain ID: {payload.numeric_chain_id}",
        f"Nonce: {payload.nonce}",
        f"Issued At: {payload.issued_at}",
    ]
    if payload.expiration_time:
        fields.append(f"Expiration Time: {payload.expiration_time}")
    if payload.not_before:
        fields.append(f"Not Before: {payload.not_before}")
    if payload.request_id is not None:
        fields.append(f"Request ID: {payload.request_id}")
    if payload.resources is not None:
        fields.append("\n".join(["Resources:", *(f"- {r}" for r in payload.resources)]))
    prefix = f"{prefix}\n\n{payload.statement}" if payload.statement is not None else prefix + "\n"
    return prefix + "\n\n" + "\n".join(fields)
