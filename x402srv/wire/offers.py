"""The documents x402srv answers with: 402 offers, AccessGrants, PAYMENT-RESPONSE.

Pure functions of the config and a record. Every 402 puts a ``requestId`` in
each requirement's ``extra`` (docs/how-it-works.md): a challenge's
own, and for discovery a fresh random one per response, stored nowhere (a
discovery-first purchase takes it as its requestId when it is paid). The
discovery offer is otherwise fixed while a server runs (``catalog``), and a
challenge's 402 is answered for every unpaid request, so both are assembled
from templates (the compact JSON of everything but the ids, made once by
``json.dumps``) instead of building and encoding the documents each time; they
are byte for byte what ``json.dumps(..., separators=(",", ":"))`` makes of them.

Every requirement's ``extra`` and every ``plans[]`` entry carry what the plan
includes (``x402srv.config.plans.wire_terms``: period, calls, rate limit).
"""

from __future__ import annotations

import binascii
import functools
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from x402srv.access.ids import uuid4_str
from x402srv.access.records import ChallengeRecord, Offer
from x402srv.config.discovery import DiscoveryConfig
from x402srv.config.models import Config, Plan
from x402srv.config.plans import wire_terms
from x402srv.errors import ChallengeExpired
from x402srv.interfaces import Clock, IssuedCredential, system_clock
from x402srv.wire.bazaar import bazaar_extension
from x402srv.wire.networks import NetworkInfo
from x402srv.wire.offer_receipt import OFFER_RECEIPT, OfferReceiptSigner
from x402srv.wire.payment_identifier import PAYMENT_IDENTIFIER, declaration
from x402srv.wire.protocol import encode_header, requirement
from x402srv.wire.siwx import SiwxDeclarer, access_scope

__all__ = [
    "MAX_PAYMENT_REQUIRED_BYTES",
    "AccessGranted",
    "OfferBuilder",
    "PaymentOffer",
    "plan_offers",
    "rfc3339",
    "with_request_id",
]

log = logging.getLogger("x402srv.wire.offers")


#: Challenge templates kept per offered requirement; more means prices changed often.
_MAX_TEMPLATES = 64
#: Marks where a template's ids go (never sent: the template is cut there). A key,
#: so its JSON (``,"\u0000ids":true``) can never occur inside a string value.
_IDS = "\x00ids"
_IDS_JSON = "," + json.dumps({_IDS: True}, separators=(",", ":"))[1:-1]
#: What common clients read in a PAYMENT-REQUIRED header (x402-conformance check P6).
MAX_PAYMENT_REQUIRED_BYTES = 8 * 1024


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

    ``parts`` are the document cut at the end of each requirement's ``extra``
    (after ``planId``): joined by the ids they are the document. ``members``
    (``,"planId":...,"resourceId":``) is completed per record.
    """

    parts: tuple[str, ...]
    members: str


@dataclass(frozen=True, slots=True)
class _DiscoveryTemplate:
    """The discovery 402's body and ``PAYMENT-REQUIRED`` JSON, cut where the requestId goes."""

    body: tuple[str, ...]
    header: tuple[str, ...]


def with_request_id(accepts: Iterable[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    """Copies of requirements with ``request_id`` last in each ``extra`` (a gateway's 402)."""
    return [{**accept, "extra": {**accept["extra"], "requestId": request_id}} for accept in accepts]


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
    def __init__(self, config: Config, *, clock: Clock = system_clock) -> None:
        self._config = config
        self._clock = clock
        #: Declares sign-in-with-x in every 402 unless ``[siwx] enabled = false``
        #: (docs/sign-in-with-x.md); a fresh nonce per answer.
        self.siwx = (
            SiwxDeclarer(config.siwx, config.seller.agent_url, config.access_url)
            if config.siwx.enabled
            else None
        )
        #: Signs offers and receipts when ``[offer_receipt]`` is set (docs/offer-receipt.md).
        self.signer = (
            OfferReceiptSigner(config.offer_receipt, config.seller.agent_url, clock=clock)
            if config.offer_receipt is not None
            else None
        )
        #: Each plan's bazaar metadata (docs/bazaar.md): in its challenges' 402s.
        self._discoveries = {p.plan_id: p.discovery for p in config.plans if p.discovery}
        #: The discovery 402 without a requestId: what every plan costs (the gateway's
        #: routes narrow it). Never sent as it is: ``discovery()`` adds the requestId.
        self.catalog, self._discovery = self._build_discovery()
        #: Every network a plan is paid on, in the catalogue's order (SIWX's chains).
        self._networks = tuple(
            dict.fromkeys(accept["network"] for accept in self.catalog.body["accepts"])
        )
        self._templates: dict[tuple[Any, ...], _ChallengeTemplate] = {}
        _warn_if_oversized(self)

    def _resource(
        self, description: str, discovery: DiscoveryConfig | None = None
    ) -> dict[str, Any]:
        return {
            "url": self._config.access_url,
            "description": discovery.description
            if discovery and discovery.description
            else description,
            "mimeType": discovery.mime_type
            if discovery and discovery.mime_type
            else "application/json",
        }

    def extensions(self, discovery: DiscoveryConfig | None = None) -> dict[str, Any]:
        """What every 402 declares: payment-identifier, and a plan's or route's bazaar metadata.

        (Signed offers are added per answer: they carry a validity.)
        """
        declared = {PAYMENT_IDENTIFIER: declaration(self._config.payment_identifier.required)}
        if discovery is not None:
            declared.update(bazaar_extension(discovery))
        return declared

    def _plan_discovery(self, plan_id: str) -> DiscoveryConfig | None:
        return self._discoveries.get(plan_id)

    def discovery(
        self, request_id: str | None = None, *, resource_id: str = "default"
    ) -> PaymentOffer:
        """The discovery 402 with a fresh random requestId (the same in every requirement).

        It is stored nowhere: an unpaid request costs no write. A client that
        pays one of these requirements echoes it in ``accepted.extra``, and the
        purchase takes it as its requestId, which then proves it (``proof``).
        """
        ids = ',"requestId":' + _json_string(request_id or uuid4_str())
        required, body = ids.join(self._discovery.header), ids.join(self._discovery.body)
        if self.signer is not None:
            offers = self.signer.offers(self._config.access_url, self.catalog.body["accepts"])
            required = _with_offers(required, offers, extended=True)
            body = _with_offers(body, offers, extended=True)
        if self.siwx is not None:  # discovery: a grant of any plan (docs/sign-in-with-x.md)
            member = self.siwx.member(
                scope=access_scope(None, resource_id),
                uri=self._config.access_url,
                networks=self._networks,
                now=self._clock(),
            )
            required, body = _with_member(required, member), _with_member(body, member)
        header = binascii.b2a_base64(required.encode(), newline=False).decode("ascii")
        return PaymentOffer(header=header, content=body.encode())

    def _build_discovery(self) -> tuple[PaymentOffer, _DiscoveryTemplate]:
        """Every plan's every option, plan by plan (a client pays the first it can)."""
        config = self._config
        accepts = [
            requirement(
                network=option.network,
                amount=option.amount,
                pay_to=config.seller.wallet_address,
                max_timeout_seconds=config.server.max_timeout_seconds,
                plan_id=plan.plan_id,
                terms=wire_terms(plan),
            )
            for plan in config.plan_map.values()
            for option in plan.options
        ]
        required = {
            "x402Version": 2,
            "error": "Payment required: choose a plan and pay one of the accepted requirements",
            "resource": self._resource(config.seller.agent_description),
            "accepts": accepts,
        }
        first = config.network_info
        body = {
            **required,
            "plans": [_plan_entry(plan) for plan in config.plan_map.values()],
            "walletAddress": config.seller.wallet_address,
            "chainId": first.chain_id,
            "network": first.caip2,
        }
        networks = config.resolved_networks
        if len(networks) > 1:
            body["networks"] = [network.caip2 for network in networks]
        # Last in both documents, so signed offers can be added inside it (``_with_offers``).
        required["extensions"] = body["extensions"] = self.extensions()
        catalog = PaymentOffer(body=body, header=encode_header(required))
        marked = [{**accept, "extra": {**accept["extra"], _IDS: True}} for accept in accepts]
        template = _DiscoveryTemplate(
            body=tuple(_compact({**body, "accepts": marked}).split(_IDS_JSON)),
            header=tuple(_compact({**required, "accepts": marked}).split(_IDS_JSON)),
        )
        assert len(template.body) == len(template.header) == len(accepts) + 1
        return catalog, template

    def option_of(self, offer: Offer) -> NetworkInfo:
        """The network and token of one of a challenge's offers; 410 once no longer offered."""
        option = self._config.option(offer.network, offer.asset)
        if option is None:
            # The seller removed this network or token since the challenge was made.
            raise ChallengeExpired(
                f"this challenge's {offer.asset} on {offer.network} is no longer accepted; "
                "ask for a new challenge"
            )
        return option

    def offered_requirement(
        self, record: ChallengeRecord, offer: Offer | None = None
    ) -> dict[str, Any]:
        """A requirement a challenge was offered with (amounts as stored, not as now).

        ``offer`` is one of the record's offers; by default the record's own
        (the one its payment chose, once claimed).
        """
        offer = offer or Offer(record.network, record.asset, record.amount)
        return requirement(
            network=self.option_of(offer),
            amount=offer.amount,
            pay_to=record.pay_to,
            max_timeout_seconds=record.max_timeout_seconds,
            plan_id=record.plan_id,
            challenge_id=None if record.implicit else record.challenge_id,
            request_id=None if record.implicit else record.request_id,
            asset=offer.asset,
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
        # A discovery-first record (PENDING again after a refused settlement) says its
        # ids too: every 402 carries the requestId that proves its purchase.
        required = ids.join(template.parts)
        if self.signer is not None:
            accepts = [self.offered_requirement(record, offer) for offer in record.offers]
            offers = self.signer.offers(self._config.access_url, accepts)
            required = _with_offers(required, offers, extended=True)
        if self.siwx is not None:  # this plan's grant on this resource
            networks = (
                tuple(offer.network for offer in record.options)
                if record.options
                else (record.network,)
            )
            required = _with_member(
                required,
                self.siwx.member(
                    scope=access_scope(record.plan_id, record.resource_id),
                    uri=self._config.access_url,
                    networks=networks,
                    now=self._clock(),
                ),
            )
        body = (
            required[:-1]
            + ids
            + template.members
            + _json_string(record.resource_id)
            + ',"expiresAt":"'
            + rfc3339(record.expires_at)
            + '"}'
        )
        header = binascii.b2a_base64(required.encode(), newline=False).decode("ascii")
        return PaymentOffer(header=header, content=body.encode())

    def _template(self, record: ChallengeRecord, description: str) -> _ChallengeTemplate:
        key = (  # what ``record.offers`` is made of, without making it per request
            record.plan_id,
            record.options,
            record.network,
            record.asset,
            record.amount,
            record.pay_to,
            record.max_timeout_seconds,
            description,
        )
        template = self._templates.get(key)
        if template is None:
            if len(self._templates) >= _MAX_TEMPLATES:
                self._templates.clear()
            template = self._templates[key] = self._build_template(record, description)
        return template

    def _build_template(self, record: ChallengeRecord, description: str) -> _ChallengeTemplate:
        accepts = []
        for offer in record.offers:
            accepted = requirement(
                network=self.option_of(offer),
                amount=offer.amount,
                pay_to=record.pay_to,
                max_timeout_seconds=record.max_timeout_seconds,
                plan_id=record.plan_id,
                asset=offer.asset,
                terms=self._terms(record.plan_id),
            )
            accepted["extra"][_IDS] = True  # extra's last member: where the ids go
            accepts.append(accepted)
        required = {
            "x402Version": 2,
            "error": "Payment required: sign the accepted requirement and retry with "
            "PAYMENT-SIGNATURE"
            if len(accepts) == 1
            else "Payment required: sign one of the accepted requirements and retry with "
            "PAYMENT-SIGNATURE",
            "resource": self._resource(description, self._plan_discovery(record.plan_id)),
            "accepts": accepts,
        }
        required["extensions"] = self.extensions(self._plan_discovery(record.plan_id))
        parts = tuple(_compact(required).split(_IDS_JSON))
        assert len(parts) == len(accepts) + 1
        members = f',"planId":{_compact(record.plan_id)},"resourceId":'
        return _ChallengeTemplate(parts=parts, members=members)

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
        explorer = self.explorer_url(record)
        if explorer:
            grant["explorerUrl"] = explorer
        if self.signer is not None and record.payer is not None:
            # Signed once, kept in the grant: every answer with it shows the same receipt.
            grant["receipt"] = self.signer.receipt(
                self._config.access_url, record.payer, record.network, record.tx_hash
            )
        return grant

    def explorer_url(self, record: ChallengeRecord) -> str | None:
        """Where the record's settlement transaction is shown, if its network has an explorer."""
        option = self._config.option(record.network, record.asset)
        return option.explorer_url(record.tx_hash) if option and record.tx_hash else None

    def granted(self, record: ChallengeRecord) -> AccessGranted:
        assert record.grant is not None
        receipt: dict[str, Any] = {
            "success": True,
            "transaction": record.tx_hash,
            "network": record.network,
            "payer": record.payer,
        }
        signed = record.grant.get("receipt")
        if isinstance(signed, dict):
            receipt["extensions"] = {OFFER_RECEIPT: OfferReceiptSigner.receipt_extension(signed)}
        return AccessGranted(grant=record.grant, receipt=receipt)


def _plan_entry(plan: Plan) -> dict[str, Any]:
    """A plan in the discovery body; ``options`` when it is paid more than one way."""
    first = plan.options[0]
    entry: dict[str, Any] = {
        "planId": plan.plan_id,
        "unitAmount": plan.unit_amount,
        "description": plan.description,
        "amount": str(first.amount),
        "asset": first.network.asset,
        "network": first.network.caip2,
        **wire_terms(plan),
    }
    if len(plan.options) > 1:
        entry["options"] = [
            {
                "network": option.network.caip2,
                "asset": option.network.asset,
                "amount": str(option.amount),
                "decimals": option.network.decimals,
            }
            for option in plan.options
        ]
    return entry


def _warn_if_oversized(offers: OfferBuilder) -> None:
    """Say at start-up which 402s carry a PAYMENT-REQUIRED header too large for clients.

    Each plan's challenge is measured with the longest ids a challenge can
    have; discovery lists every plan's every option. The header is still sent:
    the seller splits the catalogue (docs/networks.md, "Too many options").
    """
    config = offers._config
    limit = MAX_PAYMENT_REQUIRED_BYTES
    size = len(offers.discovery().header)
    if size > limit:
        log.warning(
            "the discovery 402 (POST {} to %s) has %d requirements: its PAYMENT-REQUIRED "
            "header is %d bytes, over the %d that common clients read; restrict plans to "
            "fewer networks (plans.networks) or split the plans by route ([[routes]] plans)",
            config.access_url,
            len(offers.catalog.body["accepts"]),
            size,
            limit,
        )
    for plan in config.plan_map.values():
        sample = ChallengeRecord.new(
            challenge_id="0" * 36,
            request_id="0" * 36,
            plan_id=plan.plan_id,
            resource_id="r" * 256,  # the longest resourceId (it is not in the header)
            amount=str(plan.options[0].amount),
            network=plan.options[0].network.caip2,
            asset=plan.options[0].network.asset,
            pay_to=config.seller.wallet_address,
            max_timeout_seconds=config.server.max_timeout_seconds,
            now=0.0,
            ttl_seconds=0.0,
            options=plan_offers(plan),
        )
        size = len(offers.challenge(sample, plan).header)
        if size > limit:
            log.warning(
                "plan %s: its 402 offers %d networks and tokens; PAYMENT-REQUIRED would be "
                "%d bytes, over the %d that common clients read: give the plan fewer "
                "networks (plans.networks)",
                plan.plan_id,
                len(plan.options),
                size,
                limit,
            )


def plan_offers(plan: Plan) -> tuple[Offer, ...]:
    """What a challenge for ``plan`` stores as its options (none when there is one way to pay)."""
    if len(plan.options) < 2:
        return ()
    return tuple(
        Offer(option.network.caip2, option.network.asset, str(option.amount))
        for option in plan.options
    )


def _with_member(document: str, member: str) -> str:
    """``document`` (compact JSON ending with its ``extensions`` object) with one more member."""
    return document[:-2] + "," + member + "}}"


def _with_offers(document: str, offers: dict[str, Any], *, extended: bool) -> str:
    """``document`` (compact JSON ending in ``}``) with ``extensions["offer-receipt"]``.

    ``extended``: the document already ends with its ``extensions`` object, so the
    member goes inside it (``...}}``) rather than into a new one.
    """
    member = _json_string(OFFER_RECEIPT) + ":" + _compact(offers)
    if extended:
        return document[:-2] + "," + member + "}}"
    return document[:-1] + ',"extensions":{' + member + "}}"
