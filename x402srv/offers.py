"""The documents x402srv answers with: 402 offers, AccessGrants, PAYMENT-RESPONSE.

Pure functions of the config and a record. The discovery offer never changes
while a server runs, so it is built (and base64-encoded) once. A challenge's
402 is answered for every unpaid request, so its JSON is assembled from a
per-plan template (the compact JSON of everything but the two ids, made once by
``json.dumps``) instead of building and encoding the documents each time; it is
byte for byte what ``json.dumps(..., separators=(",", ":"))`` makes of them.

Every requirement's ``extra`` and every ``plans[]`` entry carry what the plan
includes (``plan_terms.wire_terms``: period, calls, rate limit).
"""

from __future__ import annotations

import base64
import functools
import json
import time
from dataclasses import dataclass
from typing import Any

from .config import Config, Plan
from .interfaces import IssuedCredential
from .plan_terms import wire_terms
from .protocol import encode_header, requirement
from .records import ChallengeRecord

__all__ = ["AccessGranted", "OfferBuilder", "PaymentOffer", "rfc3339"]


#: Challenge templates kept per offered requirement; more means prices changed often.
_MAX_TEMPLATES = 64


@functools.lru_cache(maxsize=256)
def _second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def rfc3339(timestamp: float) -> str:
    """UTC, whole seconds; the challenges of one second share their expiry text."""
    return _second(int(timestamp))


def _compact(document: Any) -> str:
    return json.dumps(document, separators=(",", ":"))


def _json_string(text: str) -> str:
    """``json.dumps(text)``; printable ASCII without quotes or backslashes needs no escaping."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return json.dumps(text)


class PaymentOffer:
    """A 402: the JSON body (PaymentRequired plus our members) and its header value.

    Made from the body (``PaymentOffer(body, header)``) or from its compact
    JSON (``content=``); the other form is derived when first asked for.
    """

    __slots__ = ("_body", "_content", "header")

    def __init__(
        self,
        body: dict[str, Any] | None = None,
        header: str = "",
        *,
        content: bytes | None = None,
    ) -> None:
        if body is None and content is None:
            raise ValueError("a PaymentOffer needs its body or its JSON")
        self._body = body
        self._content = content
        self.header = header

    @property
    def body(self) -> dict[str, Any]:
        if self._body is None:
            assert self._content is not None
            self._body = json.loads(self._content)
        return self._body

    @property
    def content(self) -> bytes:
        """The body as compact JSON, what the HTTP response carries."""
        if self._content is None:
            self._content = _compact(self.body).encode()
        return self._content


@dataclass(frozen=True, slots=True)
class _ChallengeTemplate:
    """The compact JSON of a challenge's PaymentRequired, cut where the ids go.

    ``head`` ends inside ``accepts[0].extra`` (after ``planId``); the ids, then
    ``}}]`` close extra, the requirement and ``accepts``.
    """

    head: str
    members: str  # ``,"planId":...,"resourceId":`` is completed per record


@dataclass(frozen=True, slots=True)
class AccessGranted:
    """A 200: the AccessGrant and the settlement receipt that ``PAYMENT-RESPONSE`` carries."""

    grant: dict[str, Any]
    receipt: dict[str, Any]

    @property
    def payment_response(self) -> str:
        """The ``PAYMENT-RESPONSE`` header value: the receipt, base64 JSON."""
        return encode_header(self.receipt)


class OfferBuilder:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._network = config.network_info
        self.discovery = self._build_discovery()
        self._templates: dict[tuple[Any, ...], _ChallengeTemplate] = {}

    def _resource(self, description: str) -> dict[str, Any]:
        return {
            "url": self._config.access_url,
            "description": description,
            "mimeType": "application/json",
        }

    def _build_discovery(self) -> PaymentOffer:
        config, network = self._config, self._network
        accepts = [
            requirement(
                network=network,
                amount=plan.amount,
                pay_to=config.seller.wallet_address,
                max_timeout_seconds=config.server.max_timeout_seconds,
                plan_id=plan.plan_id,
                terms=wire_terms(plan),
            )
            for plan in config.plan_map.values()
        ]
        required = {
            "x402Version": 2,
            "error": "Payment required: choose a plan and pay one of the accepted requirements",
            "resource": self._resource(config.seller.agent_description),
            "accepts": accepts,
        }
        body = {
            **required,
            "plans": [
                {
                    "planId": plan.plan_id,
                    "unitAmount": plan.unit_amount,
                    "description": plan.description,
                    "amount": str(plan.amount),
                    "asset": network.asset,
                    "network": network.caip2,
                    **wire_terms(plan),
                }
                for plan in config.plan_map.values()
            ],
            "walletAddress": config.seller.wallet_address,
            "chainId": network.chain_id,
            "network": network.caip2,
        }
        return PaymentOffer(body=body, header=encode_header(required))

    def offered_requirement(self, record: ChallengeRecord) -> dict[str, Any]:
        """The requirement a challenge was offered with (amounts as stored, not as now)."""
        return requirement(
            network=self._network,
            amount=record.amount,
            pay_to=record.pay_to,
            max_timeout_seconds=record.max_timeout_seconds,
            plan_id=record.plan_id,
            challenge_id=None if record.implicit else record.challenge_id,
            request_id=None if record.implicit else record.request_id,
            asset=record.asset,
            terms=self._terms(record.plan_id),
        )

    def _terms(self, plan_id: str) -> dict[str, Any] | None:
        plan = self._config.plan_map.get(plan_id)
        return wire_terms(plan) if plan is not None else None

    def challenge(self, record: ChallengeRecord, plan: Plan | None) -> PaymentOffer:
        """The 402 of a PENDING challenge: what it was offered, with its ids."""
        description = plan.description if plan else self._config.seller.agent_description
        template = self._template(record, description)
        ids = ',"challengeId":' + _json_string(record.challenge_id)
        ids += ',"requestId":' + _json_string(record.request_id)
        # An implicit (discovery-first) record was offered without ids in extra.
        accepts = template.head + ("" if record.implicit else ids) + "}}]"
        required = accepts + "}"
        body = (
            accepts
            + ids
            + template.members
            + _json_string(record.resource_id)
            + ',"expiresAt":"'
            + rfc3339(record.expires_at)
            + '"}'
        )
        header = base64.b64encode(required.encode()).decode("ascii")
        return PaymentOffer(header=header, content=body.encode())

    def _template(self, record: ChallengeRecord, description: str) -> _ChallengeTemplate:
        key = (
            record.plan_id,
            record.amount,
            record.pay_to,
            record.max_timeout_seconds,
            record.asset,
            description,
        )
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= _MAX_TEMPLATES:
                self._templates.clear()
            template = self._templates[key] = self._build_template(record, description)
        return template

    def _build_template(self, record: ChallengeRecord, description: str) -> _ChallengeTemplate:
        accepted = requirement(
            network=self._network,
            amount=record.amount,
            pay_to=record.pay_to,
            max_timeout_seconds=record.max_timeout_seconds,
            plan_id=record.plan_id,
            asset=record.asset,
            terms=self._terms(record.plan_id),
        )
        required = {
            "x402Version": 2,
            "error": "Payment required: sign the accepted requirement and retry with "
            "PAYMENT-SIGNATURE",
            "resource": self._resource(description),
            "accepts": [accepted],  # extra is its last member, accepts the document's
        }
        text = _compact(required)
        assert text.endswith("}}]}")
        members = f',"planId":{_compact(record.plan_id)},"resourceId":'
        return _ChallengeTemplate(head=text[: -len("}}]}")], members=members)

    def grant(self, record: ChallengeRecord, credential: IssuedCredential) -> dict[str, Any]:
        assert record.tx_hash is not None
        grant: dict[str, Any] = {
            "type": "AccessGrant",
            "challengeId": record.challenge_id,
            "requestId": record.request_id,
            "planId": record.plan_id,
            "resourceId": record.resource_id,
            "accessToken": credential.token,
            "tokenType": credential.token_type,
            "expiresAt": rfc3339(credential.expires_at),
            "txHash": record.tx_hash,
            "network": record.network,
        }
        explorer = self._network.explorer_url(record.tx_hash)
        if explorer:
            grant["explorerUrl"] = explorer
        return grant

    def granted(self, record: ChallengeRecord) -> AccessGranted:
        assert record.grant is not None
        receipt = {
            "success": True,
            "transaction": record.tx_hash,
            "network": record.network,
            "payer": record.payer,
        }
        return AccessGranted(grant=record.grant, receipt=receipt)
