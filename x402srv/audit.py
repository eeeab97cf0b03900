"""``x402srv audit``: does every transfer to the seller's wallet have its record, and back?

Scans the token's ``Transfer`` logs to ``wallet_address`` in a block range and
matches each one to a challenge: by txHash (the record owns it, is PAID or
DELIVERED, and names the same payer and amount), else by the authorization the
transaction used (``AuthorizationUsed(from, nonce)`` in the same receipt ->
the payment claim). Then it walks the PAID/DELIVERED records and checks that
the chain really holds their transfer. Anything left over is reported, and
the command exits non-zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .chain import AUTHORIZATION_USED_TOPIC, TRANSFER_TOPIC, Log, address_topic, topic_address
from .errors import ConfigError
from .pipeline import AccessPipeline
from .records import ChallengeRecord, PaymentKey, State

__all__ = ["AuditReport", "Transfer", "audit"]

PAID_STATES = (State.PAID, State.DELIVERED)


@dataclass(frozen=True, slots=True)
class Transfer:
    tx_hash: str
    block: int
    payer: str
    value: int


@dataclass
class AuditReport:
    from_block: int
    to_block: int
    matched: list[tuple[Transfer, str]] = field(default_factory=list)
    unmatched: list[tuple[Transfer, str]] = field(default_factory=list)
    missing_on_chain: list[tuple[str, str]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.unmatched and not self.missing_on_chain


def _accounts_for(record: ChallengeRecord | None, transfer: Transfer) -> bool:
    return (
        record is not None
        and record.state in PAID_STATES
        and record.tx_hash == transfer.tx_hash
        and (record.payer or "").lower() == transfer.payer
        and int(record.amount) == transfer.value
    )


async def _match(pipeline: AccessPipeline, transfer: Transfer, taken: set[str]) -> tuple[bool, str]:
    """(matched?, challengeId or why not); a challenge in ``taken`` accounts for no more.

    One transaction may carry several equal transfers from one payer (a batch of
    its authorizations): the txHash's owner accounts for one of them, each other
    challenge in it for its own.
    """
    record = await pipeline.store.get_by_tx_hash(transfer.tx_hash)
    if record is not None and record.challenge_id not in taken and _accounts_for(record, transfer):
        return True, record.challenge_id
    assert pipeline.chain is not None
    receipt = await pipeline.chain.receipt(transfer.tx_hash)
    network = pipeline.network
    for log in receipt.logs if receipt else ():
        if log.topics[:1] != (AUTHORIZATION_USED_TOPIC,) or len(log.topics) < 3:
            continue
        if topic_address(log.topics[1]) != transfer.payer:
            continue
        key = PaymentKey(network.chain_id, network.asset, transfer.payer, log.topics[2])
        claimed = await pipeline.store.get_by_payment(key)
        if claimed is not None and claimed.challenge_id in taken:
            continue
        if _accounts_for(claimed, transfer):
            assert claimed is not None
            return True, claimed.challenge_id
        if claimed is not None:
            return False, (
                f"its authorization is claimed by challenge {claimed.challenge_id} "
                f"({claimed.state.value}); run x402srv reconcile"
            )
    if record is not None and record.challenge_id in taken:
        return False, f"challenge {record.challenge_id} owns the txHash but accounts for another"
    if record is not None:
        return False, f"challenge {record.challenge_id} owns the txHash but does not match it"
    return False, "no challenge accounts for it"


async def audit(pipeline: AccessPipeline, *, from_block: int, to_block: int | None) -> AuditReport:
    chain = pipeline.chain
    if chain is None:
        raise ConfigError("auditing needs an RPC URL", path="settlement.rpc_url")
    latest, _ = await chain.latest_block()
    last = latest if to_block is None else min(to_block, latest)
    report = AuditReport(from_block, last)
    wallet = pipeline.config.seller.wallet_address
    topics: list[object] = [TRANSFER_TOPIC, None, address_topic(wallet)]
    logs: list[Log] = await chain.logs(pipeline.network.asset, topics, from_block, last)
    taken: set[str] = set()
    for log in logs:
        transfer = Transfer(
            log.tx_hash, log.block_number, topic_address(log.topics[1]), int(log.data, 16)
        )
        matched, why = await _match(pipeline, transfer, taken)
        if matched:
            taken.add(why)
        (report.matched if matched else report.unmatched).append((transfer, why))
    for record in await pipeline.store.list_challenges(states=PAID_STATES, limit=1_000_000):
        assert record.tx_hash is not None
        receipt = await chain.receipt(record.tx_hash)
        payer = record.payer or ""
        nonce = record.payment.nonce if record.payment else ""
        if receipt is None or not receipt.settles(
            record.asset, payer, record.pay_to, int(record.amount), nonce
        ):
            report.missing_on_chain.append((record.challenge_id, record.tx_hash))
    return report
