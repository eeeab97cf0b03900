"""``x402srv export`` / ``import``: a store's whole content as JSON lines, to move a seller.

The format (version 1), one JSON object per line::

    {"format": "x402srv-store-dump", "version": 1, "store": "sqlite", "exported_at": "..."}
    {"kind": "challenge", "record": {...ChallengeRecord.to_dict...},
     "payment_claims": ["84532:0x...:0x...:0x..."], "tx_claims": ["0x..."]}
    {"kind": "task", "task_id": "...", "version": 3, "prune_after": 1700000000.0, "document": {...}}
    {"kind": "credits", "account": {...credit_rules.encode_account...}}
    {"kind": "lease", "name": "gas-wallet:...", "fence": 7, "value": "..."}
    {"kind": "count", "bucket": 1700002800, "name": "paid:hourly", "n": 12}
    {"kind": "end", "counts": {"challenge": 120, "task": 4, "credits": 2, "lease": 2, ...}}

The items come from the store's ``PortableStore`` methods; the console's
per-hour counters (``count``) from ``read_counts`` and, on import,
``add_counts``, which every store has. The header names the format and its
version; the last line counts what came before it, so a file cut short is
refused instead of half imported. Import reads and checks the whole input
before it writes anything, refuses a store that already holds a challenge,
task or credit account (a seller moves into an empty store; importing twice
would not be a move), then writes in batches.

A dump holds every grant (bearer tokens) and every payment signature: it is
written with mode 0600, and should be kept like the database it came from.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from x402srv.access.records import ChallengeRecord
from x402srv.interfaces import (
    Clock,
    CreditAccount,
    ExportedChallenge,
    ExportedLease,
    ExportedTask,
    ExportItem,
    PortableStore,
    Store,
)
from x402srv.refunds.records import RefundRecord
from x402srv.refunds.store import RefundStore, keeps_refunds
from x402srv.stores.credit_rules import decode_account, encode_account
from x402srv.wire.offers import rfc3339

__all__ = [
    "BATCH",
    "FORMAT",
    "NOUNS",
    "VERSION",
    "Dump",
    "DumpCounts",
    "DumpError",
    "ProgressCallback",
    "decode_item",
    "encode_item",
    "export_store",
    "holds_anything",
    "import_store",
    "no_progress",
    "portable",
    "read_dump",
    "write_atomically",
]

FORMAT = "x402srv-store-dump"
VERSION = 1
#: Items per ``import_items`` call.
BATCH = 500
KINDS = ("challenge", "task", "credits", "lease", "count", "refund")
#: Every counters bucket: hours since the epoch, well past any real one.
ALL_BUCKETS = (0, 2**62)


class DumpError(ValueError):
    """The input is not a complete dump this x402srv reads, or the target store is not empty."""


#: What each kind is called in a summary: (one, many).
NOUNS = {
    "challenge": ("challenge", "challenges"),
    "task": ("task", "tasks"),
    "credits": ("credit account", "credit accounts"),
    "lease": ("lease", "leases"),
    "count": ("hourly counter", "hourly counters"),
    "refund": ("refund", "refunds"),
}
#: Items between two progress reports: often enough for a bar, cheap for a big store.
PROGRESS_EVERY = 100

#: ``progress(done, total, phase)``: ``total`` None while it is not known.
ProgressCallback = Callable[[int, int | None, str | None], None]


def no_progress(done: int, total: int | None, phase: str | None) -> None:
    return None


@dataclass(frozen=True, slots=True)
class DumpCounts:
    counts: dict[str, int]

    def __str__(self) -> str:
        """``120 challenges, 1 task, 40 hourly counters``: the kinds it holds, counted."""
        parts = []
        for kind in KINDS:
            n = self.counts.get(kind, 0)
            one, many = NOUNS[kind]
            if n:
                parts.append(f"{n:,} {one if n == 1 else many}")
        return ", ".join(parts) or "nothing (an empty store)"


def portable(store: Store) -> PortableStore:
    if not isinstance(store, PortableStore):
        raise DumpError(f"the {store.name} store cannot export or import (no PortableStore)")
    return store


def kind_of(item: ExportItem) -> str:
    if isinstance(item, ExportedChallenge):
        return "challenge"
    if isinstance(item, ExportedTask):
        return "task"
    if isinstance(item, CreditAccount):
        return "credits"
    return "lease"


def encode_item(item: ExportItem) -> dict[str, Any]:
    if isinstance(item, ExportedChallenge):
        return {
            "kind": "challenge",
            "record": item.record.to_dict(),
            "payment_claims": list(item.payment_claims),
            "tx_claims": list(item.tx_claims),
        }
    if isinstance(item, ExportedTask):
        return {
            "kind": "task",
            "task_id": item.task_id,
            "version": item.version,
            "prune_after": item.prune_after,
            "document": item.document,
        }
    if isinstance(item, CreditAccount):
        return {"kind": "credits", "account": json.loads(encode_account(item))}
    return {"kind": "lease", "name": item.name, "fence": item.fence, "value": item.value}


def decode_item(data: dict[str, Any]) -> ExportItem:
    """One line's object as the item it stands for; ``ValueError``/``KeyError``/``TypeError``
    when it is not one."""
    kind = data.get("kind")
    if kind == "challenge":
        return ExportedChallenge(
            ChallengeRecord.from_dict(data["record"]),
            tuple(_strings(data.get("payment_claims", []))),
            tuple(_strings(data.get("tx_claims", []))),
        )
    if kind == "task":
        if not isinstance(data["document"], dict):
            raise TypeError("a task document must be an object")
        after = data.get("prune_after")
        return ExportedTask(
            str(data["task_id"]),
            data["document"],
            int(data["version"]),
            None if after is None else float(after),
        )
    if kind == "credits":
        return decode_account(json.dumps(data["account"]))
    if kind == "lease":
        value = data.get("value")
        return ExportedLease(
            str(data["name"]), int(data["fence"]), None if value is None else str(value)
        )
    raise ValueError(f"unknown kind {kind!r}")


def _strings(values: Any) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError("claims must be a list of strings")
    return values


def _line(document: dict[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n"


async def export_store(
    store: Store, out: IO[str], *, clock: Clock, progress: ProgressCallback = no_progress
) -> DumpCounts:
    """Write the header, every item, the counters, the refunds and the end line to ``out``.

    ``progress`` hears of every ``PROGRESS_EVERY`` items written (the total is
    not known before the last one: a store has no cheap count of everything).
    """
    source = portable(store)
    out.write(
        _line(
            {
                "format": FORMAT,
                "version": VERSION,
                "store": store.name,
                "exported_at": rfc3339(clock()),
            }
        )
    )
    counts: Counter[str] = Counter()
    written = 0
    progress(0, None, "writing items")
    async for item in source.export_items():
        out.write(_line(encode_item(item)))
        counts[kind_of(item)] += 1
        written += 1
        if written % PROGRESS_EVERY == 0:
            progress(written, None, None)
    tallies = await store.read_counts(start=ALL_BUCKETS[0], end=ALL_BUCKETS[1])
    for (bucket, name), n in sorted(tallies.items()):
        out.write(_line({"kind": "count", "bucket": bucket, "name": name, "n": n}))
        counts["count"] += 1
    if keeps_refunds(store):
        assert isinstance(store, RefundStore)
        after: tuple[float, str] | None = None
        while True:
            page = await store.list_refunds(after=after, limit=BATCH)
            for refund in page:
                out.write(_line({"kind": "refund", "record": refund.to_dict()}))
                counts["refund"] += 1
            if len(page) < BATCH:
                break
            after = (page[-1].created_at, page[-1].refund_id)
    out.write(_line({"kind": "end", "counts": dict(counts)}))
    progress(sum(counts.values()), sum(counts.values()), None)
    return DumpCounts(dict(counts))


@dataclass(frozen=True, slots=True)
class Dump:
    items: list[ExportItem]
    tallies: dict[tuple[int, str], int]
    refunds: list[RefundRecord] = field(default_factory=list)


def read_dump(lines: Iterable[str], progress: ProgressCallback = no_progress) -> Dump:
    """Everything of a complete dump, checked; ``DumpError`` names the first bad line."""
    items: list[ExportItem] = []
    tallies: dict[tuple[int, str], int] = {}
    refunds: list[RefundRecord] = []
    counts: Counter[str] = Counter()
    ended: dict[str, Any] | None = None
    number = 0
    for number, text in enumerate(lines, start=1):
        if number % PROGRESS_EVERY == 0:
            progress(number, None, None)
        if not text.strip():
            continue
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            if number == 1:
                if data.get("format") != FORMAT:
                    raise ValueError(f"not an {FORMAT} (its first line names no such format)")
                if data.get("version") != VERSION:
                    raise ValueError(
                        f"format version {data.get('version')!r}; this x402srv reads {VERSION}"
                    )
                continue
            if ended is not None:
                raise ValueError("a line after the end line")
            if data.get("kind") == "end":
                ended = data
                continue
            if data.get("kind") == "count":
                key = (int(data["bucket"]), str(data["name"]))
                if key in tallies:
                    raise ValueError(f"counter {key} twice")
                tallies[key] = int(data["n"])
                counts["count"] += 1
                continue
            if data.get("kind") == "refund":
                refunds.append(RefundRecord.from_dict(data["record"]))
                counts["refund"] += 1
                continue
            item = decode_item(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise DumpError(f"line {number}: {type(exc).__name__}: {exc}") from None
        items.append(item)
        counts[kind_of(item)] += 1
    if number == 0:
        raise DumpError("the input is empty")
    if ended is None:
        raise DumpError("the input ends before its end line: it was cut short")
    expected = {kind: int(n) for kind, n in dict(ended.get("counts", {})).items() if n}
    if expected != dict(counts):
        raise DumpError(f"the end line counts {expected}, the input holds {dict(counts)}")
    return Dump(items, tallies, refunds)


async def holds_anything(store: PortableStore) -> str | None:
    """What kind of item the store already holds (leases aside), or None when it is empty."""
    items = store.export_items()
    try:
        async for item in items:
            if not isinstance(item, ExportedLease):
                return kind_of(item)
            break  # leases come last: nothing else follows
    finally:
        with contextlib.suppress(AttributeError):
            await items.aclose()  # type: ignore[attr-defined]
    return None


async def import_store(
    store: Store, lines: Iterable[str], *, clock: Clock, progress: ProgressCallback = no_progress
) -> DumpCounts:
    """Read and check everything, then write it in batches into an empty ``store``.

    ``progress`` hears of the lines read (phase "reading and checking"), then of
    the items written out of all of them (phase "writing"), batch by batch.
    """
    target = portable(store)
    progress(0, None, "reading and checking")
    dump = read_dump(lines, progress)
    items = dump.items
    held = await holds_anything(target)
    if held is None and keeps_refunds(store):
        assert isinstance(store, RefundStore)
        held = "refund" if await store.list_refunds(limit=1) else None
    if held is not None:
        raise DumpError(
            f"the {store.name} store is not empty (it holds at least one {held}); "
            "import into an empty store"
        )
    if dump.refunds and not keeps_refunds(store):
        raise DumpError(f"the {store.name} store keeps no refunds, and the dump holds some")
    counts: Counter[str] = Counter()
    tallies = sorted(dump.tallies.items())
    total = len(items) + len(tallies)
    progress(0, total, "writing")
    for start in range(0, len(items), BATCH):
        batch = items[start : start + BATCH]
        await target.import_items(batch, now=clock())
        counts.update(kind_of(item) for item in batch)
        progress(start + len(batch), total, None)
    for start in range(0, len(tallies), BATCH):
        await store.add_counts(dict(tallies[start : start + BATCH]), forget_before=0)
        progress(len(items) + min(start + BATCH, len(tallies)), total, None)
    counts["count"] += len(tallies)
    if dump.refunds:
        assert isinstance(store, RefundStore)
        for start in range(0, len(dump.refunds), BATCH):
            await store.import_refunds(dump.refunds[start : start + BATCH])
        counts["refund"] += len(dump.refunds)
    progress(total, total, None)
    return DumpCounts(dict(counts))


@contextlib.contextmanager
def write_atomically(path: Path) -> Iterator[IO[str]]:
    """A text file readable by its owner only, in place under ``path`` only once complete."""
    directory = path.parent if str(path.parent) else Path(".")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
