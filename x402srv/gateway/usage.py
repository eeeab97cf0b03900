"""What a route charged by use reads from its upstream's answer (docs/selling-calls.md).

``cost = { reserve = N, from = "header" }``: the answer's header (``header``,
``X-Usage-Cost`` by default) holds the call's cost as a decimal integer.
``from = "sse"``: a server-sent-events stream reports it in an event named
``usage`` whose data is a JSON object with an integer ``cost``; the last such
event counts, so an upstream may report its running total as it goes (a buyer
who disconnects is charged the last total seen, or the reservation).

The stream passes through untouched: ``SseUsage.feed`` only reads the bytes on
their way to the buyer. Events that do not contain ``usage`` anywhere (an LLM's
token events) are passed over unread, whichever way the chunks cut them; the
others are read a line at a time, keeping no more than one unfinished line (at
most ``MAX_LINE`` bytes; a longer one is skipped).
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["MAX_LINE", "SseUsage", "charge", "header_cost", "report_cost", "usage_event"]

#: The longest SSE line the reader looks into; the usage event is small.
MAX_LINE: Final = 64 * 1024
_DIGITS: Final = re.compile(r"[0-9]{1,12}")
#: In every usage event: a chunk of whole events without it holds none.
_USAGE: Final = b"usage"


def header_cost(value: str | None) -> int | None:
    """The cost a header reports, or None when it is absent or not a decimal integer."""
    if value is None or not _DIGITS.fullmatch(value.strip()):
        return None
    return int(value.strip())


def report_cost(document: object) -> int | None:
    """The cost in a report ``{"cost": N}`` (an SSE usage event, an MCP result's ``_meta``).

    None when it is not an object with a non-negative integer ``cost``.
    """
    cost = document.get("cost") if isinstance(document, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, int) or not 0 <= cost < 10**12:
        return None
    return cost


def _event_cost(data: str) -> int | None:
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return report_cost(document)


def _after_last_event(data: bytes, before: int | None = None) -> int:
    """Where the whole events of ``data`` (up to ``before``) end: after their last empty line."""
    lf, crlf = data.rfind(b"\n\n", 0, before), data.rfind(b"\n\r\n", 0, before)
    return max(lf + 2 if lf >= 0 else 0, crlf + 3 if crlf >= 0 else 0)


class SseUsage:
    """Reads ``event: usage`` events out of an SSE byte stream as it passes."""

    def __init__(self) -> None:
        self.cost: int | None = None  # the last valid report
        self.invalid = 0  # usage events that carried no valid cost
        self._pending = b""
        self._skipping = False  # inside a line longer than MAX_LINE
        self._event = ""
        self._data: list[str] = []
        # No event is half read (``_event``, ``_data``, ``_skipping`` empty): ``_pending``
        # then holds the unread start of an event still coming (several lines at most
        # ``MAX_LINE`` long in all), else the start of a line. Kept by ``feed`` alone.
        self._clean = True

    @property
    def mid_event(self) -> bool:
        """Whether the stream stopped inside an event (an unfinished line or event)."""
        return bool(self._pending or self._event or self._data or self._skipping)

    def feed(self, chunk: bytes) -> None:
        if self._clean:
            data = self._pending + chunk if self._pending else chunk
            if _USAGE not in data:
                # No usage event ends or starts in what came so far: the whole events up
                # to the last empty line are passed over unread (an LLM's tokens), and the
                # start of the next one is kept unread, until it proves to say "usage" (a
                # chunk may end anywhere, even inside the word).
                if data.endswith(b"\n\n") or data.endswith(b"\n\r\n"):
                    self._pending = b""  # (most chunks: whole events)
                    return
                whole = _after_last_event(data)
                rest = data[whole:] if whole else data
                if len(rest) <= MAX_LINE:
                    self._pending = rest
                    return
            else:
                # The whole events before the first that says "usage" are passed over.
                data = data[_after_last_event(data, data.find(_USAGE)) :]
            self._pending, chunk = b"", data
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            if self._skipping:
                self._skipping = False
                continue
            self._line(line.rstrip(b"\r").decode("utf-8", "replace"))
        if len(self._pending) > MAX_LINE:
            self._pending, self._skipping = b"", True
        self._clean = not (self._event or self._data or self._skipping)

    def _line(self, line: str) -> None:
        if not line:
            if self._event == "usage" and self._data:
                cost = _event_cost("\n".join(self._data))
                if cost is None:
                    self.invalid += 1
                else:
                    self.cost = cost
            self._event, self._data = "", []
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)


def charge(reserve: int, reported: int | None, *, on_missing: str) -> int:
    """What a call costs: the report capped at the reserve, or the seller's choice without one."""
    if reported is None:
        return reserve if on_missing == "reserve" else 0
    return min(reported, reserve)


def usage_event(*, reserved: int, charged: int, balance: int | None) -> bytes:
    """The event x402srv appends to a metered stream: what the buyer paid and has left."""
    data = json.dumps(
        {"reserved": reserved, "charged": charged, "balance": balance}, separators=(",", ":")
    )
    return f"event: x402-usage\ndata: {data}\n\n".encode()
