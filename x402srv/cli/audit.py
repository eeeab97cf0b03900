"""``x402srv audit``: does every transfer to the seller's wallet have its record, and back?

Scans the token's ``Transfer`` logs to ``wallet_address`` in a block range and
matches each one to a challenge: by txHash (the record owns it, is PAID or
DELIVERED, and names the same payer and amount), else by the authorization the
transaction used (``AuthorizationUsed(from, nonce)`` in the same receipt ->
the payment claim). Then it walks the PAID/DELIVERED records and checks that
the chain really holds their transfer. Anything left over is reported, and
the command exits non-zero.

Every network is audited on its own chain, with a block cursor of its own
(``audit_networks``: block numbers of one chain mean nothing on another), for
each token the seller accepts there. A claim is looked up on the network and
token of the transfer, as the pipeline made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from x402srv.access.given_back import kept_payment
from x402srv.access.pipeline import AccessPipeline
from x402srv.access.records import ChallengeRecord, PaymentKey, State
from x402srv.config.models import Network
from x402srv.errors import ConfigError
from x402srv.settlement.chain import (
    AUTHORIZATION_USED_TOPIC,
    TRANSFER_TOPIC,
    ChainReader,
    Log,
    address_topic,
    topic_address,
)

__all__ = ["AuditReport", "Transfer", "audit", "audit_networks"]

#: States whose transfer happened (OWED: paid, and owed back to the buyer).
PAID_STATES = (State.PAID, State.DELIVERED, State.OWED)


@dataclass(frozen=True, slots=True)
class Transfer:
    tx_hash: str
    block: int
    payer: str
    value: int
    asset: str = ""


@dataclass
class AuditReport:
    from_block: int
    to_block: int
    network: str = ""
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
        and record.asset.lower() == transfer.asset.lower()
        and (record.payer or "").lower() == transfer.payer
        and int(record.amount) == transfer.value
    )


def _holds(record: ChallengeRecord, payer: str, nonce: str) -> bool:
    """Whether ``record`` is settling (or paid with) the authorization ``(payer, nonce)``."""
    payment = record.payment
    return (
        payment is not None
        and payment.payer.lower() == payer.lower()
        and payment.nonce.lower() == nonce.lower()
    )


async def _match(
    pipeline: AccessPipeline,
    network: Network,
    chain: ChainReader,
    transfer: Transfer,
    taken: set[str],
) -> tuple[bool, str]:
    """(matched?, challengeId or why not); a challenge in ``taken`` accounts for no more.

    One transaction may carry several equal transfers from one payer (a batch of
    its authorizations): the txHash's owner accounts for one of them, each other
    challenge in it for its own.
    """
    record = await pipeline.store.get_by_tx_hash(transfer.tx_hash)
    if record is not None and record.challenge_id not in taken and _accounts_for(record, transfer):
        return True, record.challenge_id
    receipt = await chain.receipt(transfer.tx_hash)
    for log in receipt.logs if receipt else ():
        if log.topics[:1] != (AUTHORIZATION_USED_TOPIC,) or len(log.topics) < 3:
            continue
        if topic_address(log.topics[1]) != transfer.payer:
            continue
        key = PaymentKey(network.chain_id, transfer.asset, transfer.payer, log.topics[2])
        claimed = await pipeline.store.get_by_payment(key)
        if claimed is None or claimed.challenge_id in taken:
            continue
        if _accounts_for(claimed, transfer):
            return True, claimed.challenge_id
        if _holds(claimed, transfer.payer, log.topics[2]):
            if kept_payment(claimed):
                # (docs/protocol/states.md, "A payment given back": the chain decides it)
                return False, (
                    f"its authorization was given back by challenge {claimed.challenge_id} "
                    "(PENDING) and sent to the token since: its buyer's next request "
                    "delivers it, or x402srv reconcile once the challenge is past expiresAt"
                )
            return False, (
                f"its authorization is claimed by challenge {claimed.challenge_id} "
                f"({claimed.state.value}); run x402srv reconcile"
            )
        # A settler gave it back and the challenge kept its claim, but no longer the
        # payment (the buyer paid it with another one meanwhile, or it was given back
        # by a version that kept no payment): no reconciler pass moves the money
        # onto a purchase (docs/protocol/states.md, "A payment given back").
        return False, (
            f"its authorization was given back unsettled by challenge "
            f"{claimed.challenge_id} ({claimed.state.value}): no purchase paid with it"
        )
    if record is not None and record.challenge_id in taken:
        return False, f"challenge {record.challenge_id} owns the txHash but accounts for another"
    if record is not None:
        return False, f"challenge {record.challenge_id} owns the txHash but does not match it"
    return False, "no challenge accounts for it"


async def audit(
    pipeline: AccessPipeline, *, from_block: int, to_block: int | None, network: str | None = None
) -> AuditReport:
    """One network (default: the first) from ``from_block`` to ``to_block`` (default: latest)."""
    caip2 = network or pipeline.network.caip2
    [report] = await audit_networks(pipeline, {caip2: (from_block, to_block)})
    return report


async def audit_networks(
    pipeline: AccessPipeline, cursors: Mapping[str, tuple[int, int | None]]
) -> list[AuditReport]:
    """Each network of ``cursors`` (CAIP-2 -> first block, last block or None), in config order."""
    reports = []
    for network in pipeline.config.resolved_networks:
        if network.caip2 not in cursors:
            continue
        chain = pipeline.chains.get(network.caip2)
        if chain is None:
            raise ConfigError(
                f"auditing {network.caip2} needs an RPC URL",
                path=f"{network.path}.rpc_url"
                if network.path.startswith("networks")
                else "settlement.rpc_url",
            )
        first, last = cursors[network.caip2]
        reports.append(await _audit_network(pipeline, network, chain, first, last))
    unknown = set(cursors) - {n.caip2 for n in pipeline.config.resolved_networks}
    if unknown:
        raise ConfigError(f"not a configured network: {', '.join(sorted(unknown))}")
    return reports


async def _audit_network(
    pipeline: AccessPipeline,
    network: Network,
    chain: ChainReader,
    from_block: int,
    to_block: int | None,
) -> AuditReport:
    latest, _ = await chain.latest_block()
    last = latest if to_block is None else min(to_block, latest)
    report = AuditReport(from_block, last, network.caip2)
    wallet = pipeline.config.seller.wallet_address
    topics: list[object] = [TRANSFER_TOPIC, None, address_topic(wallet)]
    taken: set[str] = set()
    for token in network.tokens:
        logs: list[Log] = await chain.logs(token.asset, topics, from_block, last)
        for log in logs:
            payer = topic_address(log.topics[1])
            transfer = Transfer(
                log.tx_hash, log.block_number, payer, int(log.data, 16), token.asset
            )
            matched, why = await _match(pipeline, network, chain, transfer, taken)
            if matched:
                taken.add(why)
            (report.matched if matched else report.unmatched).append((transfer, why))
    for record in await pipeline.store.list_challenges(states=PAID_STATES, limit=1_000_000):
        if record.network != network.caip2:
            continue
        assert record.tx_hash is not None
        receipt = await chain.receipt(record.tx_hash)
        payer = record.payer or ""
        nonce = record.payment.nonce if record.payment else ""
        if receipt is None or not receipt.settles(
            record.asset, payer, record.pay_to, int(record.amount), nonce
        ):
            report.missing_on_chain.append((record.challenge_id, record.tx_hash))
    return report
