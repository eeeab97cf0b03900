"""What every store's ``import_items`` checks before it writes (``PortableStore``).

An import moves a seller into an empty store, so anything it would write over
is a mistake (the same dump imported twice, two dumps mixed): the batch is
refused whole with a ``ValueError`` naming the first clash. Each store checks
what it already holds in its own atomic step; the clashes inside one batch are
found here, the same way for all of them, before the store looks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from x402srv.interfaces import (
    CreditAccount,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
)

__all__ = ["ImportBatch", "sort_items"]


@dataclass(slots=True)
class ImportBatch:
    """One ``import_items`` call's items by kind, checked for clashes among themselves."""

    challenges: list[ExportedChallenge] = field(default_factory=list)
    tasks: list[ExportedTask] = field(default_factory=list)
    accounts: list[CreditAccount] = field(default_factory=list)
    leases: list[ExportedLease] = field(default_factory=list)

    def live_accounts(self, now: float) -> list[CreditAccount]:
        """Accounts still kept at ``now`` (the others are absent by the credit rules)."""
        return [account for account in self.accounts if account.keep_until >= now]


def sort_items(items: Sequence[ExportItem]) -> ImportBatch:
    """The items by kind; ``ValueError`` when two of them name the same thing."""
    batch = ImportBatch()
    seen: set[tuple[str, str]] = set()

    def once(kind: str, name: str) -> None:
        if (kind, name) in seen:
            raise ValueError(f"the import names {kind} {name!r} twice")
        seen.add((kind, name))

    for item in items:
        if isinstance(item, ExportedChallenge):
            once("challenge", item.record.challenge_id)
            once("request id", item.record.request_id)
            for key in item.payment_claims:
                once("payment claim", key)
            for tx in item.tx_claims:
                once("txHash claim", tx)
            batch.challenges.append(item)
        elif isinstance(item, ExportedTask):
            once("task", item.task_id)
            batch.tasks.append(item)
        elif isinstance(item, CreditAccount):
            once("credit account", item.grant_id)
            batch.accounts.append(item)
        else:
            once("lease", item.name)
            batch.leases.append(item)
    return batch
