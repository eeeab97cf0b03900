"""Step 3: the challenge a paying request is about, if it has one yet.

In this order: the one ``accepted.extra.challengeId`` names (400 if none, 409
if the body's requestId names another), else the one of ``body.requestId``,
else the one that claimed this very payment. A payment alone finds only a
discovery-first purchase (a challenge-first buyer names its challenge), and
the caller must still prove it bought it (``proof``). None: a discovery-first
purchase, whose challenge is created once the payment passes step 5
(``implicit_purchase``).
"""

from __future__ import annotations

from x402srv.access.progress import SentPayment
from x402srv.access.records import ChallengeRecord
from x402srv.errors import InvalidRequest, RequestIdConflict, TxAlreadyRedeemed
from x402srv.interfaces import Store
from x402srv.wire.protocol import AccessBody

__all__ = ["find_challenge"]


async def find_challenge(
    store: Store, body: AccessBody, payment: SentPayment
) -> ChallengeRecord | None:
    """The challenge of this payment; None when it starts a discovery-first purchase."""
    challenge_id = payment.payload.extra_str("challengeId")
    if challenge_id is not None:
        record = await store.get_challenge(challenge_id)
        if record is None:
            raise InvalidRequest("accepted.extra.challengeId names no challenge on this server")
        if body.request_id and body.request_id != record.request_id:
            raise RequestIdConflict("requestId and accepted.extra.challengeId disagree")
        return record
    if body.request_id:
        record = await store.get_by_request_id(body.request_id)
        if record is not None:
            return record
    record = await store.get_by_payment(payment.key)
    if record is None:
        return None
    if not record.implicit:
        raise TxAlreadyRedeemed(
            "this payment was already redeemed; fetch its grant with its requestId"
        )
    return record
