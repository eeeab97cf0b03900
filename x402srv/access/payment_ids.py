"""payment-identifier: an idempotency key bound to one payment (docs/payment-identifier.md).

    what the payment carries                   answer
    -----------------------------------------  ------------------------------------------------
    no id, the seller does not require one     as always
    no id, the seller requires one             400 INVALID_REQUEST (nothing stored)
    a malformed id (16-128 of [A-Za-z0-9_-])   400 INVALID_REQUEST (nothing stored)
    an id first seen                           bound to this payment, then as always
    an id bound to this very payment           as always: the same payment's same answer
    an id bound to another payment             409 PAYMENT_ID_CONFLICT (nothing moves)

An id is bound only once its payment passed step 5 (checked against the
requirement it claims, signature included), just before the claim: bad input
never writes. The binding is a document created only if absent in the store
every instance shares (``Store.save_task``: the one create-if-absent document
every store implements, under a key no task id can have), kept as long as
paid challenges are kept. Two different payments racing for one id: one
creates the document, the other reads it and is refused.
"""

from __future__ import annotations

import re
from typing import Final

from x402srv.access.progress import SentPayment
from x402srv.errors import InternalError, InvalidRequest, PaymentIdConflict
from x402srv.interfaces import Clock, Store
from x402srv.wire.payment_identifier import PAYMENT_IDENTIFIER
from x402srv.wire.protocol import PaymentPayload

__all__ = ["PaymentIds", "payment_id_of"]

FORMAT: Final = "x402srv.payment-id/1"
_ID: Final = re.compile(r"[A-Za-z0-9_-]{16,128}")
_KEY_PREFIX: Final = "payment-id:"


def payment_id_of(payment: PaymentPayload) -> str | None:
    """The id in ``extensions["payment-identifier"].info.id``; 400 if it is malformed."""
    extensions = (payment.model_extra or {}).get("extensions")
    if not isinstance(extensions, dict):
        return None
    extension = extensions.get(PAYMENT_IDENTIFIER)
    if not isinstance(extension, dict):
        return None
    info = extension.get("info")
    value = info.get("id") if isinstance(info, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidRequest(
            "extensions.payment-identifier.info.id must be 16-128 characters of [A-Za-z0-9_-]"
        )
    return value


class PaymentIds:
    def __init__(self, store: Store, clock: Clock, *, required: bool, keep_seconds: float) -> None:
        self.store = store
        self.clock = clock
        self.required = required
        self.keep_seconds = keep_seconds

    def read(self, payment: PaymentPayload) -> str | None:
        """At the edge, before anything is stored: the id, well formed, present if required."""
        found = payment_id_of(payment)
        if found is None and self.required:
            raise InvalidRequest(
                "this seller requires a payment id: extensions.payment-identifier.info.id"
            )
        return found

    async def bind(self, payment: SentPayment) -> None:
        """Bind the payment's id to it; 409 if the id is bound to another payment."""
        found = payment_id_of(payment.payload)
        if found is None:
            return
        key, fingerprint = _KEY_PREFIX + found, str(payment.key)
        document = {"format": FORMAT, "payment": fingerprint}
        for _ in range(2):  # a binding pruned between the two calls: create it again
            created = await self.store.save_task(
                key, document, expect_version=None, prune_after=self.clock() + self.keep_seconds
            )
            if created is not None:
                return
            stored = await self.store.get_task(key)
            if stored is None:
                continue
            if stored[0].get("payment") == fingerprint:
                return
            raise PaymentIdConflict(
                "this payment id is bound to another payment; a new payment needs a new id"
            )
        raise InternalError()
