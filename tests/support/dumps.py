"""A store dump of many records, written straight to a file: what ``x402srv import`` reads.

Tests of the operator commands fill a real sqlite store by importing it (the
command under test, or its neighbour), instead of running thousands of
purchases: the records are the builders' (``make_record``), on the network
and token of ``config.example.toml`` (base-sepolia USDC).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from x402srv.access.records import State, Transition
from x402srv.stores.dump import FORMAT, VERSION
from x402srv.testing.builders import BASE_TIME, make_grant, make_record


def write_dump(path: Path, count: int, *, delivered: int = 0) -> list[str]:
    """``count`` PENDING challenges (the first ``delivered`` of them DELIVERED); their ids."""
    ids = []
    with path.open("w", encoding="utf-8") as out:
        header = {"format": FORMAT, "version": VERSION, "store": "sqlite", "exported_at": "x"}
        out.write(json.dumps(header) + "\n")
        for index in range(count):
            record = make_record(at=BASE_TIME + index)
            if index < delivered:
                record = replace(
                    record,
                    state=State.DELIVERED,
                    grant=make_grant(record),
                    history=(
                        Transition(State.PENDING, BASE_TIME + index, "challenge issued"),
                        Transition(State.DELIVERED, BASE_TIME + index + 1.5, "grant delivered"),
                    ),
                )
            ids.append(record.challenge_id)
            item = {"kind": "challenge", "record": record.to_dict()}
            out.write(json.dumps(item, separators=(",", ":")) + "\n")
        out.write(json.dumps({"kind": "end", "counts": {"challenge": count}}) + "\n")
    return ids
