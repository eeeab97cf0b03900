"""x402 v2 on the wire: body and header codecs, requirements, and the payment check.

No I/O here. Everything a client sends is decoded by a function of this module,
which either returns a typed value or raises ``InvalidRequest`` (malformed) or
``PaymentFailed`` (well-formed but not an acceptable payment, docs/protocol/flow.md step 5).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from x402srv.config.problems import problems
from x402srv.errors import InvalidRequest, PaymentFailed, UnsupportedMediaType
from x402srv.interfaces import Authorization
from x402srv.wire.eip712 import Eip3009Domain, TransferAuthorization, recover_signer
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.reasons import Reason

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADER_CHARS",
    "MAX_JSON_CONTAINERS",
    "AccessBody",
    "JsonTooDeep",
    "PaymentPayload",
    "access_body",
    "bounded_json",
    "check_payment",
    "decode_payment_header",
    "encode_header",
    "for_third_parties",
    "parse_access_body",
    "parse_payment_payload",
    "requirement",
]

MAX_BODY_BYTES = 64 * 1024
MAX_HEADER_CHARS = 8 * 1024


_RESOURCE_ID = re.compile(r"[A-Za-z0-9._:/-]{1,256}")
_PLAN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")  # what config allows a plan id to be
#: Ids this server hands out are lowercase canonical UUIDs; anything else names nothing.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Our own ids, which name records on this server: never sent to a facilitator.
PRIVATE_EXTRA = ("challengeId", "requestId")

HexAddress = Annotated[str, StringConstraints(pattern=r"^0x[0-9a-fA-F]{40}$")]
Uint = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,78}$")]
Bytes32 = Annotated[str, StringConstraints(pattern=r"^0x[0-9a-fA-F]{64}$")]
HexBytes = Annotated[str, StringConstraints(pattern=r"^0x(?:[0-9a-fA-F]{2}){1,2048}$")]
ShortText = Annotated[str, StringConstraints(max_length=256)]


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="allow")


class WireAuthorization(_Wire):
    from_: HexAddress = Field(alias="from")
    to: HexAddress
    value: Uint
    validAfter: Uint
    validBefore: Uint
    nonce: Bytes32


class ExactPayload(_Wire):
    signature: HexBytes
    authorization: WireAuthorization


class WireRequirements(_Wire):
    scheme: ShortText
    network: ShortText
    asset: ShortText
    amount: Uint
    payTo: ShortText
    maxTimeoutSeconds: int = Field(ge=0, le=10**9)
    extra: dict[str, Any] | None = None


class PaymentPayload(_Wire):
    """The decoded ``PAYMENT-SIGNATURE`` header (docs/protocol/wire.md)."""

    x402Version: Literal[2]
    payload: ExactPayload
    accepted: WireRequirements

    def extra_str(self, key: str) -> str | None:
        value = (self.accepted.extra or {}).get(key)
        return value if isinstance(value, str) else None

    @property
    def request_id(self) -> str | None:
        """``accepted.extra.requestId``: the id the 402 offered, echoed (checked as a UUID)."""
        return self.extra_str("requestId")


@dataclass(frozen=True, slots=True)
class AccessBody:
    plan_id: str | None
    request_id: str | None
    resource_id: str
    top_up: str | None = None  # the requestId of the grant a top-up adds calls to

    def with_request_id(self, request_id: str) -> AccessBody:
        """This body naming ``request_id`` (``dataclasses.replace`` costs several times more)."""
        return AccessBody(self.plan_id, request_id, self.resource_id, self.top_up)


MAX_JSON_CONTAINERS = 256


class JsonTooDeep(ValueError):
    """More JSON arrays/objects than any document we accept contains."""


def bounded_json(raw: bytes | str) -> Any:
    """``json.loads`` for input we do not control, with nesting bounded up front.

    eth-account pulls in py_ecc, which raises Python's recursion limit to
    100000; the C JSON parser then recurses on ``[[[[...`` until the C stack
    overflows and the process dies (a 64 KiB body was enough). Counting the
    containers first is a C-speed scan, and no document we accept needs more.
    Raises ValueError (``JsonTooDeep`` for the bound).
    """
    if isinstance(raw, bytes):
        opening = raw.count(b"[") + raw.count(b"{")
    else:
        opening = raw.count("[") + raw.count("{")
    if opening > MAX_JSON_CONTAINERS:
        raise JsonTooDeep(f"more than {MAX_JSON_CONTAINERS} JSON arrays/objects")
    try:
        return json.loads(raw)
    except RecursionError:
        raise JsonTooDeep("nested too deeply") from None


def _loads(raw: bytes | str, what: str) -> Any:
    try:
        return bounded_json(raw)
    except JsonTooDeep:
        raise InvalidRequest(
            f"{what} has more than {MAX_JSON_CONTAINERS} JSON arrays/objects"
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(f"{what} is not valid JSON") from None


#: Bodies at most this long are remembered once parsed (``_parse_small``).
SMALL_BODY_BYTES = 256


def parse_access_body(raw: bytes, content_type: str | None) -> AccessBody:
    """The body of ``POST /x402/access``: a JSON object, maybe empty, at most 64 KiB."""
    if len(raw) <= SMALL_BODY_BYTES and type(raw) is bytes:
        return _parse_small(raw, content_type)
    return _parse_access_body(raw, content_type)


@functools.lru_cache(maxsize=256)
def _parse_small(raw: bytes, content_type: str | None) -> AccessBody:
    """A small body's parse, remembered.

    Unpaid clients send the same few bodies again and again (``{"planId":"hourly"}``),
    and an ``AccessBody`` is immutable. A body that is refused raises each time
    (``lru_cache`` remembers no exception).
    """
    return _parse_access_body(raw, content_type)


def _parse_access_body(raw: bytes, content_type: str | None) -> AccessBody:
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidRequest(f"request body is larger than {MAX_BODY_BYTES} bytes")
    if not raw.strip():
        return AccessBody(None, None, "default")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType("the body must be JSON (Content-Type: application/json)")
    data = _loads(raw, "request body")
    if not isinstance(data, dict):
        raise InvalidRequest("request body must be a JSON object")
    return access_body(data)


def access_body(data: Mapping[str, Any]) -> AccessBody:
    """The fields of an access request, checked: the HTTP body's, or an A2A data part's."""
    plan_id = _optional_str(data, "planId", 64)
    request_id = _uuid(data, "requestId")
    resource_id = _optional_str(data, "resourceId", 256) or "default"
    if not _RESOURCE_ID.fullmatch(resource_id):
        raise InvalidRequest("resourceId must match [A-Za-z0-9._:/-]{1,256}")
    return AccessBody(plan_id, request_id, resource_id, _uuid(data, "topUp"))


def _uuid(data: Mapping[str, Any], key: str) -> str | None:
    value = _optional_str(data, key, 64)
    if value is None:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidRequest(f"{key} must be a UUID") from None


def _optional_str(data: Mapping[str, Any], key: str, max_length: int) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > max_length:
        raise InvalidRequest(f"{key} must be a non-empty string of at most {max_length} chars")
    return value


def decode_payment_header(value: str) -> PaymentPayload:
    """``PAYMENT-SIGNATURE``: base64url or standard base64, padded or not (step 1)."""
    text = value.strip()
    if len(text) > MAX_HEADER_CHARS:
        raise InvalidRequest(f"PAYMENT-SIGNATURE is longer than {MAX_HEADER_CHARS} characters")
    if not text:
        raise InvalidRequest("PAYMENT-SIGNATURE is empty")
    text = text.replace("-", "+").replace("_", "/").rstrip("=")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("PAYMENT-SIGNATURE is not base64") from None
    data = _loads(raw, "PAYMENT-SIGNATURE")
    return parse_payment_payload(data, where="PAYMENT-SIGNATURE")


def parse_payment_payload(data: object, *, where: str = "payment payload") -> PaymentPayload:
    """A v2 PaymentPayload from already-decoded JSON (the header, or an A2A message)."""
    if not isinstance(data, dict):
        raise InvalidRequest(f"{where} must hold a JSON object")
    try:
        payload = PaymentPayload.model_validate(data)
    except ValidationError as exc:
        path, message = problems(exc)[0]
        raise InvalidRequest(f"{where} {path or 'payload'}: {message}") from None
    extra = payload.accepted.extra or {}
    for key, pattern, what in (
        ("planId", _PLAN_ID, "a plan id ([A-Za-z0-9._-]{1,64})"),
        ("challengeId", _UUID, "a challenge id (a lowercase UUID)"),
        # The requestId a 402 offered: the secret that proves a purchase (docs/protocol/proof.md).
        ("requestId", _UUID, "a request id (a lowercase UUID)"),
    ):
        raw_value = extra.get(key)
        if raw_value is None:
            continue
        # Checked here, at the edge: a string no store can hold (a lone surrogate,
        # NUL, thousands of characters) is the client's mistake, not a 500.
        if not isinstance(raw_value, str) or not pattern.fullmatch(raw_value):
            raise InvalidRequest(f"{where} accepted.extra.{key} must be {what}")
    return payload


def for_third_parties(document: Mapping[str, Any]) -> dict[str, Any]:
    """A payment payload or requirement without our ids, as a facilitator may see it.

    ``challengeId`` and ``requestId`` name a purchase on this server (the
    requestId proves it, docs/protocol/proof.md), so they never leave toward a facilitator or
    any other third party: removed from ``extra`` (a requirement) and from
    ``accepted.extra`` (a payload). The input is not changed.
    """
    cleaned = _without_ids(document)
    accepted = cleaned.get("accepted")
    if isinstance(accepted, Mapping):
        cleaned["accepted"] = _without_ids(accepted)
    return cleaned


def _without_ids(holder: Mapping[str, Any]) -> dict[str, Any]:
    copy = dict(holder)
    extra = copy.get("extra")
    if isinstance(extra, Mapping):
        copy["extra"] = {k: v for k, v in extra.items() if k not in PRIVATE_EXTRA}
    return copy


def encode_header(document: Any) -> str:
    """Standard base64 of compact JSON, as ``PAYMENT-REQUIRED``/``PAYMENT-RESPONSE`` carry."""
    compact = json.dumps(document, separators=(",", ":"))
    return base64.b64encode(compact.encode()).decode("ascii")


def requirement(
    *,
    network: NetworkInfo,
    amount: int | str,
    pay_to: str,
    max_timeout_seconds: int,
    plan_id: str,
    challenge_id: str | None = None,
    request_id: str | None = None,
    asset: str | None = None,
    terms: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One x402 v2 ``PaymentRequirements`` for the ``exact`` scheme.

    ``terms`` (``x402srv.config.plans.wire_terms``: period, calls, rate limit) go into
    ``extra`` after ``planId``, so an agent compares plans before it pays.
    """
    extra: dict[str, Any] = {
        "name": network.asset_name,
        "version": network.asset_version,
        "planId": plan_id,
        **(terms or {}),
    }
    if challenge_id:
        extra["challengeId"] = challenge_id
    if request_id:
        extra["requestId"] = request_id
    return {
        "scheme": "exact",
        "network": network.caip2,
        "amount": str(amount),
        "asset": asset or network.asset,
        "payTo": pay_to,
        "maxTimeoutSeconds": max_timeout_seconds,
        "extra": extra,
    }


def _check_window(valid_after: int, valid_before: int, now: float, max_timeout: int) -> None:
    if valid_after > now:
        raise PaymentFailed(Reason.VALID_AFTER, "authorization is not valid yet")
    if valid_before < now + 6:
        raise PaymentFailed(Reason.VALID_BEFORE, "authorization expires too soon")
    if valid_before > now + max_timeout + 60:
        raise PaymentFailed(Reason.VALID_BEFORE, "authorization is valid for too long")


def check_payment(
    payment: PaymentPayload,
    offered: dict[str, Any],
    network: NetworkInfo,
    domain: Eip3009Domain,
    now: float,
    *,
    window: bool = True,
) -> Authorization:
    """Step 5: the payment against the server's own requirement, never the client's.

    ``window=False`` skips the validAfter/validBefore checks, for a payment that
    only proves a purchase already made (docs/protocol/proof.md): a buyer may come back for
    its grant after its authorization stopped being valid.
    """
    accepted = payment.accepted
    auth = payment.payload.authorization
    if accepted.scheme != "exact":
        raise PaymentFailed(Reason.UNSUPPORTED_SCHEME, "only the exact scheme is accepted")
    if accepted.network != network.caip2:
        raise PaymentFailed(Reason.INVALID_NETWORK, f"this server settles on {network.caip2} only")
    if accepted.asset.lower() != network.asset.lower():
        raise PaymentFailed(
            Reason.INVALID_PAYMENT_REQUIREMENTS, "accepted.asset is not the configured token"
        )
    if (
        accepted.amount != offered["amount"]
        or accepted.payTo.lower() != str(offered["payTo"]).lower()
        or accepted.maxTimeoutSeconds != offered["maxTimeoutSeconds"]
        or accepted.asset.lower() != str(offered["asset"]).lower()
    ):
        raise PaymentFailed(
            Reason.INVALID_PAYMENT_REQUIREMENTS, "accepted does not match the offered requirement"
        )
    if auth.to.lower() != str(offered["payTo"]).lower():
        raise PaymentFailed(
            Reason.RECIPIENT_MISMATCH, "authorization.to is not the seller's wallet"
        )
    value = int(auth.value)
    if value != int(offered["amount"]):
        raise PaymentFailed(Reason.VALUE_MISMATCH, "authorization.value is not the plan's amount")
    valid_after, valid_before = int(auth.validAfter), int(auth.validBefore)
    if window:
        _check_window(valid_after, valid_before, now, int(offered["maxTimeoutSeconds"]))
    signature = bytes.fromhex(payment.payload.signature[2:])
    transfer = TransferAuthorization(
        payer=auth.from_,
        to=auth.to,
        value=value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=bytes.fromhex(auth.nonce[2:]),
    )
    try:
        digest = transfer.digest(domain)
    except ValueError:
        raise PaymentFailed(Reason.VALUE_MISMATCH, "authorization numbers exceed uint256") from None
    signer = recover_signer(digest, signature)
    if signer is None or signer.lower() != auth.from_.lower():
        raise PaymentFailed(
            Reason.INVALID_SIGNATURE, "the signature does not recover authorization.from"
        )
    return Authorization(
        payer=signer,
        to=auth.to,
        value=value,
        valid_after=valid_after,
        valid_before=valid_before,
        nonce=auth.nonce.lower(),
        signature=payment.payload.signature,
    )
