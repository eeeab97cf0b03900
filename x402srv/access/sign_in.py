"""sign-in-with-x: a wallet that bought before gets its grant again (docs/sign-in-with-x.md).

A ``SIGN-IN-WITH-X`` header is checked in this order; the first that fails
answers, and nothing is stored before the last step:

1. Its form (``x402srv.wire.siwx.parse_header``).           -> 400 SIWX_INVALID
2. What it was declared for: this seller's domain, the URI the 402 named, a
   nonce whose tag is this request's scope (a plan and resource at
   /x402/access, a route of the gateway), one of the seller's chains, issued
   at most ``[siwx] expiration_seconds`` ago and not expired.  -> 403 SIWX_REJECTED
3. The signature: an EOA's EIP-191 signature of the EIP-4361 message, else,
   through the network's RPC, a contract wallet's (EIP-1271
   ``isValidSignature``, or EIP-6492 for one not yet deployed).
                                  -> 403 SIWX_REJECTED, 503 SIWX_UNAVAILABLE
4. The wallet's live grant in the scope (delivered, not revoked, token not
   expired), newest first. None: the caller answers the normal 402.
5. The nonce is used, once, in the store every instance shares (a create-if-
   absent document, kept until the message could no longer be accepted
   anyway): of two requests racing with one message exactly one gets the
   grant.                                                      -> 409 SIWX_NONCE_USED

Nonces are not stored when a 402 declares them (an unpaid request costs no
write); the tag binds them to their scope and the times bound their life.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from eth_utils.address import is_checksum_address
from eth_utils.crypto import keccak

from x402srv.access.records import ChallengeRecord, State
from x402srv.access.top_ups import grant_expiry
from x402srv.config.models import Config
from x402srv.errors import SiwxInvalid, SiwxNonceUsed, SiwxRejected, SiwxUnavailable
from x402srv.interfaces import Clock, Store
from x402srv.settlement.chain import ChainReader, ChainUnavailable
from x402srv.settlement.contract_signatures import contract_signature_valid
from x402srv.wire.eip712 import recover_signer
from x402srv.wire.siwx import SiwxDeclarer, SiwxPayload, parse_header, scope_tag, siwe_message

__all__ = ["SignIn", "SignedIn", "use_nonce"]

#: How far ahead of our clock another instance's ``issuedAt`` may be.
CLOCK_SKEW_SECONDS: Final = 5.0
#: Delivered records of one wallet looked through for a grant in scope (newest first).
_MAX_RECORDS: Final = 1000
_PAGE: Final = 100
_NONCE_KEY: Final = "siwx-nonce:"
_NONCE_FORMAT: Final = "x402srv.siwx-nonce/1"


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A checked sign-in: who signed, and the message whose nonce it will use."""

    payer: str
    payload: SiwxPayload
    valid_until: float


def _time(name: str, text: str) -> float:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SiwxInvalid(f"{name} must be an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise SiwxInvalid(f"{name} must name its time zone")
    return moment.timestamp()


class SignIn:
    def __init__(
        self,
        config: Config,
        store: Store,
        clock: Clock,
        chains: Mapping[str, ChainReader],
    ) -> None:
        self.settings = config.siwx
        self.store = store
        self.clock = clock
        self.chains = chains
        self.declarer = SiwxDeclarer(config.siwx, config.seller.agent_url, config.access_url)
        self.access_url = config.access_url
        self.networks = frozenset(n.caip2 for n in config.resolved_networks)

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    async def check(self, header: str, *, scope: str, uri: str) -> SignedIn:
        """Steps 1-3: the wallet that signed this message for ``scope`` at ``uri``."""
        if not self.enabled:
            raise SiwxInvalid("this seller does not accept sign-in-with-x")
        payload = parse_header(header)
        valid_until = self._declared(payload, scope=scope, uri=uri)
        digest = keccak(_eip191(siwe_message(payload)))
        signature = bytes.fromhex(payload.signature[2:])
        if recover_signer(digest, signature) == payload.address:
            return SignedIn(payload.address, payload, valid_until)
        chain = self.chains.get(payload.chain_id)
        if chain is None:  # no RPC: a contract wallet's signature cannot be checked
            raise SiwxRejected("the signature is not the address's, and no RPC can check more")
        try:
            valid = await contract_signature_valid(chain, payload.address, digest, signature)
        except ChainUnavailable:
            raise SiwxUnavailable(
                "a contract wallet's signature needs the network's RPC, which did not answer",
                retry_after=5,
            ) from None
        if not valid:
            raise SiwxRejected("the signature is not the address's")
        return SignedIn(payload.address, payload, valid_until)

    def _declared(self, payload: SiwxPayload, *, scope: str, uri: str) -> float:
        """Step 2; the time until which the message could be accepted."""
        if payload.domain != self.declarer.domain or payload.uri != uri:
            raise SiwxRejected(f"the message was not declared by {uri}")
        if payload.version != "1":
            raise SiwxRejected("the message's version must be 1")
        if not is_checksum_address(payload.address):
            raise SiwxRejected("the message's address must be in its EIP-55 (checksum) form")
        if payload.chain_id not in self.networks:
            raise SiwxRejected(f"{payload.chain_id} is not a network of this seller")
        if payload.nonce[:16] != scope_tag(self.access_url, scope):
            raise SiwxRejected("the message was declared for another plan, route or seller")
        now = self.clock()
        issued = _time("issuedAt", payload.issued_at)
        if issued > now + CLOCK_SKEW_SECONDS:
            raise SiwxRejected("issuedAt is in the future")
        valid_until = issued + self.settings.expiration_seconds
        if payload.expiration_time is not None:
            valid_until = min(valid_until, _time("expirationTime", payload.expiration_time))
        if now >= valid_until:
            raise SiwxRejected("the message expired: sign the next 402's")
        if payload.not_before is not None and now < _time("notBefore", payload.not_before):
            raise SiwxRejected("the message is not valid yet (notBefore)")
        return valid_until

    async def grant(
        self, signed: SignedIn, plan_ids: Collection[str] | None, resource_id: str
    ) -> ChallengeRecord | None:
        """Step 4: the wallet's newest live grant of one of ``plan_ids`` (None: any plan)."""
        now = self.clock()
        before: tuple[float, str] | None = None
        for _ in range(_MAX_RECORDS // _PAGE):
            page = await self.store.find_challenges(
                states=[State.DELIVERED], payer=signed.payer.lower(), before=before, limit=_PAGE
            )
            for record in page:
                if (
                    (plan_ids is None or record.plan_id in plan_ids)
                    and record.resource_id == resource_id
                    and record.top_up_of is None  # a top-up holds no token
                    and record.revoked_at is None
                    and record.grant is not None
                    and "accessToken" in record.grant
                    and (grant_expiry(record) or 0.0) > now
                ):
                    return record
            if len(page) < _PAGE:
                return None
            before = (page[-1].updated_at, page[-1].challenge_id)
        return None

    async def use(self, signed: SignedIn) -> None:
        """Step 5: the nonce, used once across every instance; 409 for the second use."""
        await use_nonce(
            self.store, signed.payload.nonce, payer=signed.payer, valid_until=signed.valid_until
        )


async def use_nonce(store: Store, nonce: str, *, payer: str, valid_until: float) -> None:
    """Use a sign-in's nonce once in ``store``; ``SiwxNonceUsed`` if it was used before.

    A create-if-absent task document, the claim every store makes atomic (its
    contract suite races it, ``x402srv.testing.store_contract_siwx``), so a
    third-party store gets sign-in-with-x with no method of its own.
    """
    created = await store.save_task(
        _NONCE_KEY + nonce,
        {"format": _NONCE_FORMAT, "payer": payer.lower()},
        expect_version=None,
        # Past this the message is refused anyway (step 2), so the nonce can go.
        prune_after=valid_until + CLOCK_SKEW_SECONDS,
    )
    if created is None:
        raise SiwxNonceUsed("this sign-in was used before: sign the next 402's message")


def _eip191(message: str) -> bytes:
    data = message.encode()
    return b"\x19Ethereum Signed Message:\n" + str(len(data)).encode() + data
