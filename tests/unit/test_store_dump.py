"""The dump format of ``x402srv export`` / ``import``: what import refuses before it writes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from x402srv.default_plugins.memory_store import MemoryStore
from x402srv.stores.dump import DumpError, export_store, import_store, write_atomically
from x402srv.testing.builders import BASE_TIME, make_record
from x402srv.testing.store_contract_refunds import make_refund

HOUR = 1_699_999_200  # an hour's start, as the analytics buckets are
REFUND = make_refund(amount=40)


def _clock() -> float:
    return BASE_TIME


async def _dump(count: int = 3) -> list[str]:
    store = MemoryStore()
    for _ in range(count):
        await store.create_challenge(make_record())
    await store.save_task("t-1", {"status": "working"}, expect_version=None)
    await store.add_counts({(HOUR, "paid:hourly"): 3, (2 * HOUR, "402"): 40}, forget_before=0)
    await store.create_refund(REFUND, paid=100)
    out = io.StringIO()
    counts = await export_store(store, out, clock=_clock)
    assert counts.counts == {"challenge": count, "task": 1, "count": 2, "refund": 1}
    return out.getvalue().splitlines(keepends=True)


async def test_a_dump_round_trips_through_the_format() -> None:
    lines = await _dump()
    header = json.loads(lines[0])
    assert header["format"] == "x402srv-store-dump"
    assert (header["version"], header["store"]) == (1, "memory")
    assert json.loads(lines[-1]) == {
        "kind": "end",
        "counts": {"challenge": 3, "task": 1, "count": 2, "refund": 1},
    }
    target = MemoryStore()
    counts = await import_store(target, lines, clock=_clock)
    assert str(counts) == "3 challenges, 1 task, 2 hourly counters, 1 refund"
    assert await target.get_refund(REFUND.refund_id) == REFUND  # a refund moves whole
    assert await target.read_counts(start=0, end=3 * HOUR) == {
        (HOUR, "paid:hourly"): 3,
        (2 * HOUR, "402"): 40,
    }
    again = io.StringIO()
    await export_store(target, again, clock=_clock)
    assert again.getvalue().splitlines(keepends=True)[1:] == lines[1:]


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda lines: lines[:-1], "cut short"),
        (lambda lines: lines[:-2] + lines[-1:], "the end line counts"),
        (lambda lines: ['{"format": "something else"}\n', *lines[1:]], "line 1"),
        (lambda lines: [lines[0].replace('"version":1', '"version":2'), *lines[1:]], "version 2"),
        (lambda lines: [*lines[:2], "not json\n", *lines[2:]], "line 3"),
        (lambda lines: [*lines[:2], '{"kind": "ghost"}\n', *lines[2:]], "unknown kind"),
        (lambda lines: [*lines, lines[1]], "after the end line"),
        (lambda lines: [], "empty"),
    ],
    ids=["truncated", "counts", "header", "version", "json", "kind", "trailing", "empty"],
)
async def test_import_refuses_a_broken_dump_and_writes_nothing(
    mangle: Callable[[list[str]], list[str]], words: str
) -> None:
    lines = mangle(await _dump())
    target = MemoryStore()
    with pytest.raises(DumpError, match=words):
        await import_store(target, lines, clock=_clock)
    assert await target.list_challenges() == []


async def test_import_refuses_a_store_that_is_not_empty() -> None:
    lines = await _dump()
    target = MemoryStore()
    await target.save_task("mine", {}, expect_version=None)
    with pytest.raises(DumpError, match="not empty"):
        await import_store(target, lines, clock=_clock)
    assert await target.list_challenges() == []


def test_an_export_file_is_private_and_appears_only_when_complete(tmp_path: Path) -> None:
    path = tmp_path / "dump.jsonl"

    def interrupted() -> None:
        with write_atomically(path) as out:
            out.write("half")
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        interrupted()
    assert list(tmp_path.iterdir()) == []
    with write_atomically(path) as out:
        out.write("whole\n")
    assert path.read_text() == "whole\n"
    assert path.stat().st_mode & 0o777 == 0o600
