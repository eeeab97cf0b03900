"""What a route charged by use reads from its upstream (docs/selling-calls.md)."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from x402srv.config.routes import RouteConfig
from x402srv.gateway.usage import MAX_LINE, SseUsage, charge, header_cost, report_cost


def _route(cost: object) -> RouteConfig:
    return RouteConfig.model_validate({"prefix": "/v1", "upstream": "http://x", "cost": cost})


def test_the_last_usage_event_counts_across_chunk_boundaries() -> None:
    sse = SseUsage()
    for chunk in (
        b"event: token\ndata: hi\n\n: a comment\n",
        b'event: usage\r\ndata: {"co',
        b'st": 12}\r\n\r\nevent: usage\ndata: {"cost": 40}\n',
        b"\n",
    ):
        sse.feed(chunk)
    assert (sse.cost, sse.invalid) == (40, 0)


@pytest.mark.parametrize(
    "data", ['{"cost": true}', '{"cost": -1}', '{"cost": 1.5}', "[12]", "twelve", '{"n": 3}']
)
def test_an_invalid_usage_event_is_counted_and_keeps_the_last_valid_one(data: str) -> None:
    sse = SseUsage()
    sse.feed(f'event: usage\ndata: {{"cost": 5}}\n\nevent: usage\ndata: {data}\n\n'.encode())
    assert (sse.cost, sse.invalid) == (5, 1)


def test_an_overlong_line_is_skipped_without_being_kept() -> None:
    sse = SseUsage()
    sse.feed(b"data: " + b"x" * (MAX_LINE + 10))
    sse.feed(b"y" * 100 + b'\nevent: usage\ndata: {"cost": 3}\n\n')
    assert sse.cost == 3


@pytest.mark.parametrize(
    ("value", "cost"),
    [("17", 17), (" 4 ", 4), (None, None), ("", None), ("-1", None), ("1e3", None)],
)
def test_a_header_report_is_a_decimal_integer(value: str | None, cost: int | None) -> None:
    assert header_cost(value) == cost


def test_the_charge_is_capped_at_the_reserve_and_missing_follows_the_seller() -> None:
    assert charge(100, 30, on_missing="reserve") == 30
    assert charge(100, 300, on_missing="reserve") == 100
    assert charge(100, None, on_missing="reserve") == 100
    assert charge(100, None, on_missing="nothing") == 0


def test_a_route_cost_is_a_number_or_a_usage_table() -> None:
    assert _route(3).reserve == 3 and _route(3).usage is None
    usage = _route({"reserve": 500, "from": "sse", "on_missing": "nothing"}).usage
    assert usage is not None
    assert (usage.reserve, usage.source, usage.header, usage.on_missing) == (
        500,
        "sse",
        "X-Usage-Cost",
        "nothing",
    )


@pytest.mark.parametrize(
    "cost",
    [
        {"reserve": 0},
        {"reserve": 5, "from": "meta"},  # (an MCP tool's, not a route's)
        {"reserve": 5, "source": "sse"},
        {"reserve": 5, "header": "bad header"},
        {"reserve": 5, "on_missing": "half"},
        {"from": "header"},
        "5",
        True,
    ],
)
def test_a_bad_usage_table_is_refused(cost: object) -> None:
    with pytest.raises(ValidationError):
        _route(cost)


def test_a_stream_that_stops_inside_an_event_says_so() -> None:
    sse = SseUsage()
    sse.feed(b"event: token\ndata: hi\n\n")
    assert not sse.mid_event
    sse.feed(b"event: token\ndata: cut")
    assert sse.mid_event


def test_a_stream_reads_the_same_in_whole_events_as_byte_by_byte() -> None:
    """Chunks of whole events without a usage event are skipped unread: nothing is missed."""
    stream = (
        b"event: token\ndata: usage\n\n"  # (a token that says "usage" is read, not counted)
        b"event: token\r\ndata: hi\r\n\r\n"
        b'data: {"cost": 9}\nevent: usage\n\n'  # (the name may follow the data)
        b"event: token\ndata: x\n\n"
        b'event: usage\ndata: {"cost": 12}\n\n'
        b"event: token\ndata: y\n\n"
    )
    events = [e + b"\n\n" for e in stream.replace(b"\r\n", b"\n").split(b"\n\n") if e]
    whole = SseUsage()
    for event in events:
        whole.feed(event)
    readers = [whole]
    for size in (1, 2, 3, 5, 7, 11, 13, 29, len(stream)):  # events cut anywhere
        sse = SseUsage()
        for n in range(0, len(stream), size):
            sse.feed(stream[n : n + size])
        readers.append(sse)
    for sse in readers:
        assert (sse.cost, sse.invalid, sse.mid_event) == (12, 0, False)


def _read_at_once(stream: bytes) -> tuple[int | None, int, bool]:
    """The SSE rules applied to the whole stream: (last valid cost, invalid reports, mid-event)."""
    cost: int | None = None
    invalid, event, data = 0, "", list[str]()
    *lines, tail = re.split(r"\r\n|\n", stream.decode())
    for line in lines:
        if not line:
            if event == "usage" and data:
                try:
                    reported = report_cost(json.loads("\n".join(data)))
                except ValueError:
                    reported = None
                cost, invalid = (cost, invalid + 1) if reported is None else (reported, invalid)
            event, data = "", []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
    return cost, invalid, bool(tail or event or data)


STREAMS = [
    b'event: token\ndata: a\n\nevent: token\ndata: b\n\nevent: usage\ndata: {"cost": 2}\n\n',
    b'event: usage\ndata: {"cost": 4}\n\nevent: token\ndata: usage is "usage"\n\n',
    b'event: token\r\ndata: x\r\n\r\nevent: usage\r\ndata: {"cost": 7}\r\n\r\n',
    b': comment\nid: 3\nevent: usage\ndata: {"cost":\ndata:  8}\n\nevent: token\ndata: z\n\n',
    b'data: {"cost": 9}\nevent: usage\n\nevent: usage\ndata: nine\n\n',
    b'event: token\ndata: a\n\nevent: usage\ndata: {"cost": 5}\n\nevent: token\ndata: cut',
    b'event: token\ndata: t\n\nevent: usage\ndata: {"cost": 6}\n\nevent: usage\ndata: {"cost": 1}',
]


@pytest.mark.parametrize("stream", STREAMS)
def test_a_stream_cut_at_any_two_places_reads_as_the_whole_stream(stream: bytes) -> None:
    """Whatever the chunks, the reader finds what the stream says (skipping unread what it may)."""
    expected = _read_at_once(stream)
    for first in range(len(stream) + 1):
        for second in range(first, len(stream) + 1):
            sse = SseUsage()
            for chunk in (stream[:first], stream[first:second], stream[second:]):
                if chunk:
                    sse.feed(chunk)
            assert (sse.cost, sse.invalid, sse.mid_event) == expected, (first, second)
